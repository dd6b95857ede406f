package httpapi_test

import (
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
)

// TestQueuedTurnTenancy: another tenant's queued turn is not_found, to
// read and to cancel, even from a session of its own; its owner cancels it.
func TestQueuedTurnTenancy(t *testing.T) {
	s := newStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"ka": "acme", "kb": "globex"} })
	s.key = "ka"
	s.createAgent("a", scripted.Step{Hang: true})
	ses := s.createSession("a")
	base := "/v1/sessions/" + ses.ID
	var running, queued forge.Turn
	s.call("POST", base+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "one"}}, "background": true}, 202, &running)
	s.call("POST", base+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "two"}},
		"background": true, "if_busy": "enqueue"}, 202, &queued)
	if queued.Status != forge.TurnQueued {
		t.Fatalf("enqueued turn %+v", queued)
	}
	for _, bad := range []any{1, "sometimes", "", nil} {
		body := map[string]any{"input": []any{map[string]any{"type": "message", "text": "x"}}, "if_busy": bad}
		if bad == nil {
			body["if_busy"] = map[string]any{}
		}
		if a := s.do(req{method: "POST", path: base + "/turns", body: body}); a.status != 400 || a.errCode() != "invalid_request" {
			t.Fatalf("if_busy %v: %s", bad, a)
		}
	}

	var second forge.Turn
	s.call("POST", base+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "three"}},
		"background": true, "if_busy": "enqueue"}, 202, &second)
	var queue struct {
		Data       []forge.Turn `json:"data"`
		NextCursor *string      `json:"next_cursor"`
	}
	s.call("GET", base+"/turns?status=queued", nil, 200, &queue)
	if len(queue.Data) != 2 || queue.Data[0].ID != queued.ID || queue.Data[1].ID != second.ID || queue.NextCursor != nil {
		t.Fatalf("the queue %+v", queue)
	}
	for _, q := range []string{"?status=running", "?status=", "?status=queued&cursor=x"} {
		if a := s.do(req{method: "GET", path: base + "/turns" + q}); a.status != 400 || a.errCode() != "invalid_request" {
			t.Fatalf("GET turns%s: %s", q, a)
		}
	}
	s.call("POST", base+"/cancel", map[string]any{"turn_id": second.ID}, 200, nil)

	s.key = "kb"
	s.createAgent("b")
	other := s.createSession("b")
	for _, r := range []req{
		{method: "GET", path: base + "/turns?status=queued"},
		{method: "GET", path: base + "/turns/" + queued.ID},
		{method: "POST", path: base + "/cancel", body: map[string]any{"turn_id": queued.ID}},
		{method: "POST", path: "/v1/sessions/" + other.ID + "/cancel", body: map[string]any{"turn_id": queued.ID}},
	} {
		if a := s.do(r); a.status != 404 || a.errCode() != "not_found" {
			t.Fatalf("tenant B: %s %s: %s", r.method, r.path, a)
		}
	}

	s.key = "ka"
	var cancelled forge.Turn
	s.call("POST", base+"/cancel", map[string]any{"turn_id": queued.ID}, 200, &cancelled)
	if cancelled.Status != forge.TurnCancelled || cancelled.ID != queued.ID {
		t.Fatalf("cancelled %+v", cancelled)
	}
	var stillRunning forge.Turn
	s.call("GET", base+"/turns/"+running.ID, nil, 200, &stillRunning)
	if stillRunning.Status != forge.TurnRunning {
		t.Fatalf("the running turn %+v", stillRunning)
	}
	s.call("POST", base+"/cancel", map[string]any{"turn_id": running.ID}, 200, &cancelled)
	if cancelled.Status != forge.TurnCancelled || cancelled.ID != running.ID {
		t.Fatalf("cancel of the running turn by id %+v", cancelled)
	}
}
