package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/webhook"
)

func webhookStack(t *testing.T) *stack {
	s := newStack(t, func(c *httpapi.Config) {
		c.Keys = map[string]string{"ka": "acme", "kb": "globex"}
		c.WebhookURLs = webhook.URLChecker{}
	})
	s.key = "ka"
	return s
}

func TestWebhookLifecycleAndTenancy(t *testing.T) {
	s := webhookStack(t)
	var created map[string]any
	s.call("POST", "/v1/webhooks", map[string]any{"url": "https://93.184.216.34/hooks", "events": []string{"turn.done", "forum.message"},
		"description": "ops"}, 201, &created)
	id, _ := created["id"].(string)
	secret, _ := created["secret"].(string)
	if !strings.HasPrefix(id, forge.PrefixWebhook) || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("created = %v", created)
	}
	got := s.call("GET", "/v1/webhooks/"+id, nil, 200, nil)
	if strings.Contains(string(got.body), "secret") || strings.Contains(string(got.body), secret) {
		t.Fatalf("GET shows the secret: %s", got.body)
	}
	var list struct{ Data []forge.Webhook }
	s.call("GET", "/v1/webhooks", nil, 200, &list)
	if len(list.Data) != 1 || list.Data[0].ID != id || list.Data[0].Description != "ops" {
		t.Fatalf("list = %+v", list)
	}
	var deliveries struct{ Data []forge.WebhookDelivery }
	s.call("GET", "/v1/webhooks/"+id+"/deliveries", nil, 200, &deliveries)
	if len(deliveries.Data) != 0 {
		t.Fatalf("deliveries = %+v", deliveries)
	}

	s.key = "kb"
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/webhooks/" + id}, {"GET", "/v1/webhooks/" + id + "/deliveries"}, {"DELETE", "/v1/webhooks/" + id},
	} {
		if a := s.call(r.method, r.path, nil, 404, nil); a.errCode() != "not_found" {
			t.Errorf("%s %s by another tenant: %s", r.method, r.path, a)
		}
	}
	s.call("GET", "/v1/webhooks", nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("another tenant lists %+v", list.Data)
	}

	s.key = "ka"
	s.call("DELETE", "/v1/webhooks/"+id, nil, 204, nil)
	s.call("GET", "/v1/webhooks/"+id, nil, 404, nil)
}

func TestWebhookCreationRefusals(t *testing.T) {
	s := webhookStack(t)
	for _, tc := range []struct {
		name, body, says string
	}{
		{"no url", `{"events": ["turn.done"]}`, "url is required"},
		{"no events", `{"url": "https://93.184.216.34/"}`, "events"},
		{"unknown event", `{"url": "https://93.184.216.34/", "events": ["turn.created"]}`, "turn.created"},
		{"loopback", `{"url": "http://127.0.0.1:9000/hook", "events": ["turn.done"]}`, "--allow-private-webhooks"},
		{"localhost", `{"url": "http://localhost/hook", "events": ["turn.done"]}`, "loopback"},
		{"metadata endpoint", `{"url": "http://169.254.169.254/latest", "events": ["turn.done"]}`, "link-local"},
		{"private", `{"url": "https://10.0.0.7/hook", "events": ["turn.done"]}`, "private"},
		{"scheme", `{"url": "file:///etc/passwd", "events": ["turn.done"]}`, "http or https"},
		{"credentials", `{"url": "https://u:p@93.184.216.34/", "events": ["turn.done"]}`, "credentials"},
		{"unknown field", `{"url": "https://93.184.216.34/", "events": ["turn.done"], "secret": "mine"}`, "secret"},
		{"events not a list", `{"url": "https://93.184.216.34/", "events": "turn.done"}`, "events"},
		{"long description", `{"url": "https://93.184.216.34/", "events": ["turn.done"], "description": "` + strings.Repeat("x", 2000) + `"}`, "description"},
		{"deep nesting", `{"url": "https://93.184.216.34/", "events": ["turn.done"], "description": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, ""},
	} {
		a := s.do(req{method: "POST", path: "/v1/webhooks", body: tc.body})
		if a.status != 400 || !strings.Contains(string(a.body), tc.says) {
			t.Errorf("%s: %s, want 400 saying %q", tc.name, a, tc.says)
		}
	}
	var list struct{ Data []json.RawMessage }
	s.call("GET", "/v1/webhooks", nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("refused creations stored %d webhooks", len(list.Data))
	}
}

func TestWebhooksWithoutADeliverer(t *testing.T) {
	s := newStack(t)
	a := s.do(req{method: "POST", path: "/v1/webhooks", body: `{"url": "https://93.184.216.34/", "events": ["turn.done"]}`})
	if a.status != 501 {
		t.Fatalf("%s, want 501", a)
	}
}
