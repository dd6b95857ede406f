package tools

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	tests := []struct {
		args    string
		want    string
		wantErr bool
	}{
		{`{"text":"hi"}`, "hi", false},
		{`{"text":""}`, "", false},
		{`{}`, "", true},
		{`{"text":1}`, "", true},
	}
	for _, tt := range tests {
		res, err := Echo{}.Call(context.Background(), json.RawMessage(tt.args))
		if (err != nil) != tt.wantErr || res.Output != tt.want {
			t.Errorf("echo %s = %q, %v", tt.args, res.Output, err)
		}
	}
}

func TestSleepHonoursCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := (Sleep{}).Call(ctx, json.RawMessage(`{"ms":60000}`)); err == nil {
		t.Fatal("cancelled sleep returned no error")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancelled sleep did not return promptly")
	}
	if _, err := (Sleep{}).Call(context.Background(), json.RawMessage(`{"ms":-1}`)); err == nil {
		t.Fatal("negative sleep accepted")
	}
}
