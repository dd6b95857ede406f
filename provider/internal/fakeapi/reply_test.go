package fakeapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReplyBuilders(t *testing.T) {
	t.Parallel()
	base := Text("a", "b")
	r := base.Reasoning("r").Calls(Call{ID: "c", Name: "f", Args: "{}"}).Usage(Usage{Input: 3, Output: 1}).
		Finish("length").Header("X-A", "1").Delay(time.Millisecond).CutAt(AfterDeltas(1)).HangAt(AtEnd()).FailAt(BeforeFinish(), "boom")
	want := Reply{
		Items: []Item{{Kind: ItemText, Pieces: []string{"a", "b"}}, {Kind: ItemReasoning, Pieces: []string{"r"}},
			{Kind: ItemCalls, Calls: []Call{{ID: "c", Name: "f", Args: "{}"}}}},
		Tokens: &Usage{Input: 3, Output: 1}, FinishReason: "length", Headers: http.Header{"X-A": {"1"}},
		ChunkDelay: time.Millisecond, CutPoint: AfterDeltas(1), HangPoint: AtEnd(), FailPoint: BeforeFinish(), ErrorMessage: "boom",
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("reply %+v\nwant  %+v", r, want)
	}
	if len(base.Items) != 1 || base.Tokens != nil {
		t.Errorf("the base reply was modified: %+v", base)
	}
	if u := Text("x").Unfinish(); !u.Unfinished || Reasoning("y").Items[0].Kind != ItemReasoning || Calls().Items[0].Kind != ItemCalls {
		t.Error("Unfinish, Reasoning, Calls")
	}
	for _, f := range []struct {
		r    Reply
		want Reply
	}{
		{Failure(429, "slow"), Reply{Status: 429, ErrorMessage: "slow"}},
		{RawFailure(502, "<html>"), Reply{Status: 502, ErrorBody: "<html>"}},
		{ContextOverflow(), Reply{Status: 400, Overflow: true}},
	} {
		if !reflect.DeepEqual(f.r, f.want) {
			t.Errorf("%+v, want %+v", f.r, f.want)
		}
	}
}

func TestDelivery(t *testing.T) {
	t.Parallel()
	// A stream of 8 events: deltas end at events 2, 3 and 4; the finish
	// marker is the 6th.
	m := Marks{Deltas: []int{2, 3, 4}, Finish: 5, Finished: 6}
	const total = 8
	for _, tt := range []struct {
		name string
		p    Point
		want int // events before the effect, plus one
	}{
		{"after no delta", AfterDeltas(0), 1},
		{"after the first delta", AfterDeltas(1), 3},
		{"after the last delta", AfterDeltas(3), 5},
		{"past the last delta", AfterDeltas(9), 6},
		{"before the finish", BeforeFinish(), 6},
		{"after the finish", AfterFinish(), 7},
		{"at the end", AtEnd(), 9},
	} {
		r := Text().CutAt(tt.p).HangAt(tt.p).FailAt(tt.p, "x").Delay(time.Second)
		if d := r.Delivery(m, total); d != (Delivery{Delay: time.Second, Cut: tt.want, Hang: tt.want, ErrAfter: tt.want}) {
			t.Errorf("%s: %+v, want %d", tt.name, d, tt.want)
		}
	}
	if d := Text().HangAt(BeforeHeaders()).Delivery(m, total); d != (Delivery{Silent: true}) {
		t.Errorf("before the headers: %+v", d)
	}
	if d := Text().Delivery(m, total); d != (Delivery{}) || (Point{}).IsSet() || !AtEnd().IsSet() {
		t.Errorf("no points: %+v", d)
	}
}

func TestRequestAdd(t *testing.T) {
	t.Parallel()
	var r Request
	for _, p := range []Part{
		{Role: "user", Type: "text", Text: "a"}, {Role: "user", Type: "text", Text: "b"},
		{Role: "assistant", Type: "text", Text: "c"}, {Role: "assistant", Type: "tool_call", CallID: "1"},
		{Role: "assistant", Type: "text", Text: "d"}, {Role: "assistant", Type: "text", Text: "e"},
	} {
		r.Add(p)
	}
	want := []Part{{Role: "user", Type: "text", Text: "ab"}, {Role: "assistant", Type: "text", Text: "c"},
		{Role: "assistant", Type: "tool_call", CallID: "1"}, {Role: "assistant", Type: "text", Text: "de"}}
	if !reflect.DeepEqual(r.Parts, want) {
		t.Errorf("parts %+v", r.Parts)
	}
	if Compact([]byte(`{ "a" : [1, 2] }`)) != `{"a":[1,2]}` || Compact([]byte(`{"a":`)) != `{"a":` {
		t.Error("Compact")
	}
	b, err := json.Marshal(Part{Role: "tool", Type: "tool_result", Output: "x"})
	if err != nil || string(b) != `{"Role":"tool","Type":"tool_result","Output":"x"}` {
		t.Errorf("a part's JSON leaves out what it does not have: %s %v", b, err)
	}
}

// A silent stream answers nothing until the client gives up, and the
// request is counted while it is answered.
func TestSilentAndInFlight(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	l := Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		Stream(w, r.Context(), nil, Delivery{Silent: true}, [][]byte{[]byte("data: x\n\n")}, nil)
	}))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", l.URL(), nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		done <- err
	}()
	<-entered
	if n := l.InFlight(); n != 1 {
		t.Errorf("in flight %d, want 1", n)
	}
	cancel()
	// Headers would have ended Do without an error.
	if err := <-done; err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("err = %v, want the client's cancel", err)
	}
	for deadline := time.Now().Add(5 * time.Second); l.InFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the aborted request is still counted")
		}
	}
}
