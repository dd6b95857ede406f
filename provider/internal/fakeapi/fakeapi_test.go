package fakeapi

import (
	"net/http"
	"slices"
	"testing"
)

func TestScriptAndLog(t *testing.T) {
	t.Parallel()
	s := NewScript("default")
	s.Enqueue("a", "b")
	if s.Pending() != 2 || s.Next() != "a" || s.Next() != "b" || s.Next() != "default" {
		t.Fatal("queue order or default")
	}
	s.SetDefault("other")
	if s.Next() != "other" || s.Pending() != 0 {
		t.Fatal("SetDefault")
	}
	var l Log[int]
	if _, ok := l.Last(); ok || !l.On() {
		t.Fatal("empty log")
	}
	l.Add(1)
	l.SetOn(false)
	if l.On() {
		t.Fatal("SetOn(false)")
	}
	l.Add(2) // Add records regardless: callers check On first
	if got, _ := l.Last(); got != 2 || !slices.Equal(l.All(), []int{1, 2}) {
		t.Fatalf("log %v", l.All())
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	ev := SplitSSE([]byte("data: 1\r\n\r\n\n\nevent: x\ndata: 2\n\n"))
	if len(ev) != 2 || string(ev[0]) != "data: 1\n\n" || string(ev[1]) != "event: x\ndata: 2\n\n" {
		t.Fatalf("SplitSSE %q", ev)
	}
	if got := Fragments("abcdefgé", 7); !slices.Equal(got, []string{"abcdefg", "é"}) {
		t.Fatalf("Fragments %q", got)
	}
	if got := Fragments("abcdefé", 6); !slices.Equal(got, []string{"abcdef", "é"}) {
		t.Fatalf("Fragments on a rune %q", got)
	}
	if got := string(AppendString(nil, "a\"\\\n\x01<é", '}')); got != `"a\"\\\n\u0001<é"}` {
		t.Fatalf("AppendString %s", got)
	}
	h := http.Header{"A": {"1"}}
	h2 := WithHeader(h, "B", "2")
	if h.Get("B") != "" || h2.Get("A") != "1" || h2.Get("B") != "2" || WithHeader(nil, "C", "3").Get("C") != "3" {
		t.Fatal("WithHeader")
	}
}
