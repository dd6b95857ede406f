package aisdk_test

import (
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/aisdk"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
)

const chat = `{"id":"c1","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hi"}]}],"appField":{"x":1}}`

func TestStreamShape(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, aisdk.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"hello","error":"boom"}]}}`)
	status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat", chat)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	var types []string
	for _, line := range strings.Split(body, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if data == "[DONE]" {
				types = append(types, "[DONE]")
				continue
			}
			i := strings.Index(data, `"type":"`)
			types = append(types, strings.SplitN(data[i+8:], `"`, 2)[0])
		}
	}
	want := "start start-step text-start text-delta text-end error finish [DONE]"
	if strings.Join(types, " ") != want {
		t.Fatalf("chunks %v, want %s", types, want)
	}
}

func TestHostileChats(t *testing.T) {
	t.Parallel()
	s := prototest.NewWithKeys(t, map[string]string{"ka": "acme", "kb": "globex"}, aisdk.Protocol{})
	if status, body := s.Do("POST", "/v1/agents", `{"name":"bot","model":"scripted/x","model_params":{"script":[{"text":"wait","hang":true}]}}`, "Authorization", "Bearer ka"); status != 201 {
		t.Fatalf("agent: %d %s", status, body)
	}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/aisdk/v1/agents/bot/chat", strings.Repeat("[", 100) + strings.Repeat("]", 100), 400},
		{"/aisdk/v1/agents/bot/chat", `{"id":"c","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"\ud800"}]}]}`, 400},
		{"/aisdk/v1/agents/bot/chat", "{\"id\":\"c\",\"messages\":[{\"id\":\"u\",\"role\":\"user\",\"parts\":[{\"type\":\"text\",\"text\":\"\xff\"}]}]}", 400},
		{"/aisdk/v1/agents/bot/chat", `{"messages":[]}`, 400},
		{"/aisdk/v1/agents/bot/chat", `{"id":"` + strings.Repeat("c", 300) + `","messages":[]}`, 400},
		{"/aisdk/v1/agents/nobody/chat", chat, 404},
		{"/aisdk/v1/agents/bot/chat", `{"id":"c","messages":"no"}`, 400},
	} {
		status, body := s.Do("POST", c.path, c.body, "Authorization", "Bearer ka")
		if status != c.status || !strings.Contains(body, `"error"`) {
			t.Fatalf("%.50q: %d %s, want %d", c.body, status, body, c.status)
		}
	}
	big := `{"id":"c","messages":[{"id":"u","role":"user","parts":[{"type":"text","text":"` + strings.Repeat("a", 17<<20) + `"}]}]}`
	if status, _ := s.Do("POST", "/aisdk/v1/agents/bot/chat", big, "Authorization", "Bearer ka"); status != 413 {
		t.Fatalf("17 MiB chat: %d", status)
	}
	// Tenant acme starts a chat that runs; globex's same chat id is
	// another session: nothing to resume, nothing to stop.
	started := make(chan struct{})
	go func() {
		defer close(started)
		s.Do("POST", "/aisdk/v1/agents/bot/chat", chat, "Authorization", "Bearer ka")
	}()
	if status, body := s.Do("GET", "/aisdk/v1/agents/bot/chat/c1/stream", "", "Authorization", "Bearer kb"); status != 204 {
		t.Fatalf("another tenant's resume: %d %s", status, body)
	}
	if status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat/c1/stop", "", "Authorization", "Bearer kb"); status != 404 {
		t.Fatalf("another tenant's stop: %d %s", status, body)
	}
	if status, body := s.Do("GET", "/aisdk/v1/agents/bot/chat/c1/stream", "", "Authorization", "Bearer zz"); status != 401 {
		t.Fatalf("a wrong key: %d %s", status, body)
	}
	// Stop acme's chat (retrying until its turn has started), which ends
	// the send's stream.
	for {
		status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat/c1/stop", "", "Authorization", "Bearer ka")
		if status == 200 && strings.Contains(body, `"stopped":true`) {
			break
		}
		select {
		case <-started:
			t.Fatal("the send ended before it was stopped")
		default:
		}
	}
	<-started
	if status, body := s.Do("GET", "/aisdk/v1/agents/bot/chat", "", "Authorization", "Bearer ka"); status != 405 {
		t.Fatalf("GET chat: %d %s", status, body)
	}
}
