package wire

import (
	"io"
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": " 1.5 "}, 1500 * time.Millisecond},
		{"milliseconds win", map[string]string{"Retry-After": "7", "retry-after-ms": "250"}, 250 * time.Millisecond},
		{"bad milliseconds fall back", map[string]string{"Retry-After": "7", "retry-after-ms": "soon"}, 7 * time.Second},
		{"HTTP date", map[string]string{"Retry-After": now.Add(30 * time.Second).Format(http.TimeFormat)}, 30 * time.Second},
		{"date in the past", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"zero", map[string]string{"Retry-After": "0"}, 0},
		{"negative", map[string]string{"Retry-After": "-3"}, 0},
		{"absurd", map[string]string{"Retry-After": "1e12"}, 0},
		{"garbage", map[string]string{"Retry-After": "later"}, 0},
	} {
		h := http.Header{}
		for k, v := range c.header {
			h.Set(k, v)
		}
		if got := RetryAfter(h, now); got != c.want {
			t.Errorf("%s: RetryAfter = %v, want %v", c.name, got, c.want)
		}
	}
	if RetryAfter(nil, now) != 0 {
		t.Error("nil header")
	}
}

func TestDefaultClientShared(t *testing.T) {
	t.Parallel()
	if DefaultClient() != DefaultClient() || DefaultClient().Transport != DefaultTransport() {
		t.Fatal("not one shared client on the shared transport")
	}
	tr, ok := NewTransport(TransportOptions{}).(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost != DefaultMaxIdleConnsPerHost || tr.MaxIdleConns != 0 ||
		tr.IdleConnTimeout != DefaultIdleConnTimeout || tr.ResponseHeaderTimeout != 10*time.Minute || tr == http.DefaultTransport {
		t.Fatalf("transport %+v", tr)
	}
	tr, ok = NewTransport(TransportOptions{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Second}).(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost != 8 || tr.IdleConnTimeout != time.Second {
		t.Fatalf("transport with options %+v", tr)
	}
	if DefaultClient().Timeout != 0 {
		t.Fatal("an overall timeout would cut long streams")
	}
}

func TestStreamCut(t *testing.T) {
	t.Parallel()
	if got := StreamCut("http://h/v1", "m", nil, []string{"finish_reason", "usage", "[DONE]"}); got !=
		`the stream from http://h/v1 (model "m") ended before the response was complete: no finish_reason, usage or [DONE]; the server closed it` {
		t.Errorf("got %s", got)
	}
	if got := StreamCut("http://h", "m", io.ErrUnexpectedEOF, []string{"response.completed"}); got !=
		`the stream from http://h (model "m") ended before the response was complete: no response.completed; the connection was interrupted: unexpected EOF` {
		t.Errorf("got %s", got)
	}
	if got := DisplayURL("http://u:secret@h/v1"); got != "http://u:xxxxx@h/v1" {
		t.Errorf("DisplayURL %s", got)
	}
}
