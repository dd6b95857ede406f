package client

import (
	"context"
	"net/url"
	"testing"
	"time"
)

func TestWebhooksAndSessionFilters(t *testing.T) {
	t.Parallel()
	srv, seen := jsonServer(t, map[string]route{
		"POST /v1/webhooks":                {201, `{"id":"wh_1","url":"https://h.example/x","events":["turn.done"],"description":"","created_at":"2026-12-01T00:00:00Z","secret":"whsec_AAAA"}`},
		"GET /v1/webhooks/wh_1":            {200, `{"id":"wh_1","url":"https://h.example/x","events":["turn.done"]}`},
		"GET /v1/webhooks":                 {200, `{"data":[{"id":"wh_1"}],"next_cursor":null}`},
		"GET /v1/webhooks/wh_1/deliveries": {200, `{"data":[{"id":"evt_ses_1_4","webhook_id":"wh_1","status":"pending","attempts":1,"response_code":503}],"next_cursor":null}`},
		"DELETE /v1/webhooks/wh_1":         {204, ``},
		"GET /v1/sessions":                 {200, `{"data":[],"next_cursor":null}`},
	})
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	w, err := c.CreateWebhook(ctx, CreateWebhookRequest{URL: "https://h.example/x", Events: []string{"turn.done"}})
	if err != nil || w.ID != "wh_1" || w.Secret != "whsec_AAAA" {
		t.Fatalf("%+v %v", w, err)
	}
	if g, err := c.GetWebhook(ctx, "wh_1"); err != nil || g.URL != "https://h.example/x" {
		t.Fatalf("%+v %v", g, err)
	}
	if p, err := c.ListWebhooks(ctx, ListOptions{}); err != nil || len(p.Data) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	ds, err := c.ListWebhookDeliveries(ctx, "wh_1", ListOptions{Limit: 3})
	if err != nil || len(ds.Data) != 1 || ds.Data[0].ResponseCode != 503 || ds.Data[0].Attempts != 1 {
		t.Fatalf("%+v %v", ds, err)
	}
	if err := c.DeleteWebhook(ctx, "wh_1"); err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	if _, err := c.ListSessions(ctx, ListSessionsOptions{Agent: "support", Status: "idle", Metadata: map[string]string{"team": "red"},
		UpdatedAfter: after, Ascending: true}); err != nil {
		t.Fatal(err)
	}
	r := seen()
	if r[0].Body != `{"url":"https://h.example/x","events":["turn.done"]}` {
		t.Errorf("create body %s", r[0].Body)
	}
	if r[3].Query != "limit=3" {
		t.Errorf("deliveries query %q", r[3].Query)
	}
	q, _ := url.ParseQuery(r[5].Query)
	if q.Get("agent") != "support" || q.Get("status") != "idle" || q.Get("metadata.team") != "red" ||
		q.Get("updated_after") != "2026-12-01T08:00:00Z" || q.Get("order") != "asc" {
		t.Errorf("sessions query %q", r[5].Query)
	}
}
