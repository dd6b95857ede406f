package aisdk_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/protocol/aisdk"
	"github.com/forge-runtime/forge/protocol/internal/prototest"
)

// TestFilePartsAttachToTheMessage: a file part of the new user message
// (a data: URL, as useChat's sendMessage({files}) makes it) is checked and
// attached to the turn; the chat's messages give it back by its content
// URL, and sending that back attaches nothing twice; a remote URL or a
// lying data: URL is a 400 and no turn starts.
func TestFilePartsAttachToTheMessage(t *testing.T) {
	t.Parallel()
	s := prototest.New(t, aisdk.Protocol{})
	if status, body := s.Do("POST", "/v1/agents", `{"name":"bot","model":"scripted/echo"}`); status != 201 {
		t.Fatalf("agent: %d %s", status, body)
	}
	note := `data:text/plain;base64,` + "bm90ZXMgb2YgdGhlIGRheQo=" // "notes of the day\n"
	first := `{"id":"c1","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[` +
		`{"type":"file","mediaType":"text/plain","filename":"notes.txt","url":"` + note + `"},{"type":"text","text":"read this"}]}]}`
	status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat", first)
	if status != 200 || !strings.Contains(body, `File: "}`) {
		t.Fatalf("chat with a file: %d %s", status, body)
	}
	status, body = s.Do("GET", "/aisdk/v1/agents/bot/chat/c1/messages", "")
	var ms []map[string]any
	if status != 200 || json.Unmarshal([]byte(body), &ms) != nil || len(ms) != 2 {
		t.Fatalf("messages: %d %s", status, body)
	}
	parts, _ := ms[0]["parts"].([]any)
	if len(parts) != 2 {
		t.Fatalf("user parts %v", parts)
	}
	fp, _ := parts[1].(map[string]any)
	url, _ := fp["url"].(string)
	if fp["type"] != "file" || fp["filename"] != "notes.txt" || fp["mediaType"] != "text/plain" || !strings.HasPrefix(url, "/v1/files/file_") {
		t.Fatalf("the file part given back: %v", fp)
	}
	if status, got := s.Do("GET", url, ""); status != 200 || got != "notes of the day\n" {
		t.Fatalf("its content: %d %q", status, got)
	}

	// The reloaded page sends the chat back, with a new message that
	// attaches the stored file again by its URL.
	restored, _ := json.Marshal(ms)
	next := `{"id":"c1","trigger":"submit-message","messages":` + strings.TrimSuffix(string(restored), "]") +
		`,{"id":"u2","role":"user","parts":[{"type":"text","text":"again"},{"type":"file","mediaType":"text/plain","url":"` + url + `"}]}]}`
	if status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat", next); status != 200 || !strings.Contains(body, `File: "}`) {
		t.Fatalf("the next message: %d %s", status, body)
	}
	status, body = s.Do("GET", "/v1/files", "")
	var files struct {
		Data []map[string]any `json:"data"`
	}
	if status != 200 || json.Unmarshal([]byte(body), &files) != nil || len(files.Data) != 1 {
		t.Fatalf("files stored: %d %s", status, body)
	}

	for name, part := range map[string]string{
		"remote":   `{"type":"file","mediaType":"image/png","url":"http://169.254.169.254/latest/meta-data"}`,
		"lying":    `{"type":"file","mediaType":"image/png","url":"data:image/png;base64,bm90IGFuIGltYWdl"}`,
		"other id": `{"type":"file","mediaType":"image/png","url":"/v1/files/file_01NOPE/content"}`,
	} {
		req := `{"id":"c-` + strings.ReplaceAll(name, " ", "") + `","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[` +
			part + `,{"type":"text","text":"look"}]}]}`
		status, body := s.Do("POST", "/aisdk/v1/agents/bot/chat", req)
		if status != 400 && status != 404 {
			t.Fatalf("%s file part: %d %s", name, status, body)
		}
		if status, body := s.Do("GET", "/aisdk/v1/agents/bot/chat/c-"+strings.ReplaceAll(name, " ", "")+"/messages", ""); status != 200 || strings.TrimSpace(body) != "[]" {
			t.Fatalf("%s: the chat after the refusal: %d %s", name, status, body)
		}
	}
}
