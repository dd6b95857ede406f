// Package bustest is the conformance suite every forge.Bus passes: the
// in-process bus (package bus) and a Redis Streams bus alike.
//
//	func TestConformance(t *testing.T) {
//		bustest.Run(t, func(t *testing.T, o bustest.Options) forge.Bus { return newBus(t, o) })
//	}
package bustest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// Options tell the factory how small to make what the suite exercises.
type Options struct {
	// Buffer is how many unread events a subscriber may have before the
	// bus may cut it off (a bus that never cuts subscribers off passes).
	Buffer int
	// BacklogMax bounds the events the bus keeps per session; the suite
	// checks the text so far of parts whose deltas were trimmed.
	BacklogMax int
}

// Factory returns a new, empty bus configured by o; it closes it when t
// ends.
type Factory func(t *testing.T, o Options) forge.Bus

// Run runs the suite.
func Run(t *testing.T, newBus Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"HeldAfterCursor", testHeldAfterCursor},
		{"LiveWait", testLiveWait},
		{"PublishedBeforeNextIsReturned", testPublishedBeforeNext},
		{"SeqMustIncrease", testSeqMustIncrease},
		{"SessionsAreIsolated", testSessionsIsolated},
		{"EventsOutsideTurns", testOutsideTurns},
		{"EndedTurnKeptForResume", testEndedTurnKept},
		{"NextTurnKeepsPreviousTail", testNextTurnKeepsTail},
		{"CutOffSubscriberResumes", testCutOffResumes},
		{"TrimmedBacklogTextSoFar", testTextSoFar},
		{"Close", testClose},
		{"ConcurrentSubscribers", testConcurrentSubscribers},
		{"Ephemeral", testEphemeral},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newBus)
		})
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// event returns an event of the session's turn (turn "" for none).
func event(session, turn string, seq int64, typ string, data any) forge.Event {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	ev := forge.Event{Seq: seq, ID: fmt.Sprintf("id_%d", seq), Type: typ, SessionID: session,
		CreatedAt: time.Unix(1700000000, seq).UTC(), Data: raw}
	if turn != "" {
		ev.TurnID = &turn
	}
	return ev
}

func delta(session, turn, part string, seq int64, text string) forge.Event {
	ev := event(session, turn, seq, forge.EventModelDelta, forge.DeltaData{Delta: text})
	ev.ID = part
	return ev
}

func partEvent(session, turn, thread string, seq int64, p forge.Part) forge.Event {
	ev := event(session, turn, seq, forge.EventModelMessage, p)
	ev.ID = p.ID
	ev.ThreadID = &thread
	return ev
}

func publish(t *testing.T, b forge.Bus, evs ...forge.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := b.Publish(ctxOf(t), ev); err != nil {
			t.Fatalf("publish seq %d: %v", ev.Seq, err)
		}
	}
}

// subscribe returns the held events and the subscription.
func subscribe(t *testing.T, b forge.Bus, session string, after int64) ([]forge.Event, forge.BusSubscription) {
	t.Helper()
	held, s, err := b.Subscribe(ctxOf(t), session, after)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return held, s
}

// heldAfter returns what the bus holds after the cursor.
func heldAfter(t *testing.T, b forge.Bus, session string, after int64) []forge.Event {
	t.Helper()
	held, s := subscribe(t, b, session, after)
	_ = s.Close()
	return held
}

// drain returns what Next has now without waiting.
func drain(t *testing.T, s forge.BusSubscription) []forge.Event {
	t.Helper()
	var out []forge.Event
	for {
		evs, err := s.Next(ctxOf(t), false)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
	}
}

func seqs(evs []forge.Event) string {
	var b []string
	for _, ev := range evs {
		b = append(b, fmt.Sprint(ev.Seq))
	}
	return strings.Join(b, ",")
}

func series(session, turn string, from, to int64) []forge.Event {
	var out []forge.Event
	for s := from; s <= to; s++ {
		out = append(out, delta(session, turn, "prt_x", s, fmt.Sprint(s)))
	}
	return out
}

func begin(t *testing.T, b forge.Bus, session, turn string) {
	t.Helper()
	if err := b.BeginTurn(ctxOf(t), session, turn); err != nil {
		t.Fatal(err)
	}
}

func end(t *testing.T, b forge.Bus, session, turn string) {
	t.Helper()
	if err := b.EndTurn(ctxOf(t), session, turn); err != nil {
		t.Fatal(err)
	}
}

func testHeldAfterCursor(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	publish(t, b, event("ses_a", "turn_1", 1, forge.EventTurnCreated, map[string]string{}))
	publish(t, b, series("ses_a", "turn_1", 2, 5)...)
	held, s := subscribe(t, b, "ses_a", 2)
	if got := seqs(held); got != "3,4,5" {
		t.Fatalf("held after 2: %s, want 3,4,5", got)
	}
	if got := drain(t, s); len(got) != 0 {
		t.Fatalf("Next returned held events again: %s", seqs(got))
	}
	publish(t, b, series("ses_a", "turn_1", 6, 6)...)
	if got := seqs(drain(t, s)); got != "6" {
		t.Fatalf("live: %s, want 6", got)
	}
	if got := seqs(heldAfter(t, b, "ses_a", 0)); got != "1,2,3,4,5,6" {
		t.Fatalf("held after 0: %s", got)
	}
	if got := heldAfter(t, b, "ses_a", 6); len(got) != 0 {
		t.Fatalf("held after the last seq: %s", seqs(got))
	}
}

func testLiveWait(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	_, s := subscribe(t, b, "ses_a", 0)
	got := make(chan []forge.Event, 1)
	go func() {
		evs, err := s.Next(ctxOf(t), true)
		if err != nil {
			t.Error(err)
		}
		got <- evs
	}()
	publish(t, b, series("ses_a", "turn_1", 1, 1)...)
	select {
	case evs := <-got:
		if seqs(evs) != "1" {
			t.Fatalf("waited for %s", seqs(evs))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next(wait) did not return the published event")
	}
	// A cancelled wait returns the context's error.
	ctx, cancel := context.WithCancel(ctxOf(t))
	cancel()
	if _, err := s.Next(ctx, true); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next on a cancelled context: %v", err)
	}
}

// testPublishedBeforeNext checks what readers rely on to merge the bus
// with the stored log: once Publish returned, the next Next has the event.
func testPublishedBeforeNext(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	_, s := subscribe(t, b, "ses_a", 0)
	for seq := int64(1); seq <= 200; seq++ {
		publish(t, b, series("ses_a", "turn_1", seq, seq)...)
		if got := seqs(drain(t, s)); got != fmt.Sprint(seq) {
			t.Fatalf("after publishing %d, Next gave %q", seq, got)
		}
	}
}

func testSeqMustIncrease(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	publish(t, b, series("ses_a", "turn_1", 5, 5)...)
	for _, seq := range []int64{5, 4} {
		err := b.Publish(ctxOf(t), delta("ses_a", "turn_1", "prt_x", seq, "x"))
		if !errors.Is(err, forge.ErrConflict) {
			t.Fatalf("publishing seq %d after 5: %v, want ErrConflict", seq, err)
		}
	}
	// Another session has its own seqs.
	publish(t, b, series("ses_b", "", 1, 1)...)
}

func testSessionsIsolated(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	begin(t, b, "ses_b", "turn_2")
	_, sa := subscribe(t, b, "ses_a", 0)
	_, sb := subscribe(t, b, "ses_b", 0)
	publish(t, b, series("ses_a", "turn_1", 1, 3)...)
	publish(t, b, series("ses_b", "turn_2", 1, 2)...)
	if got := drain(t, sa); seqs(got) != "1,2,3" || got[0].SessionID != "ses_a" {
		t.Fatalf("ses_a got %s", seqs(got))
	}
	if got := drain(t, sb); seqs(got) != "1,2" || got[0].SessionID != "ses_b" {
		t.Fatalf("ses_b got %s", seqs(got))
	}
}

// testOutsideTurns: events that belong to no turn (forum ingestion) are
// delivered and held like any other.
func testOutsideTurns(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	_, s := subscribe(t, b, "ses_f", 0)
	publish(t, b, event("ses_f", "", 1, forge.EventMessageCreated, map[string]string{"id": "msg_1"}))
	got := drain(t, s)
	if seqs(got) != "1" || got[0].TurnID != nil {
		t.Fatalf("live %s turn %v", seqs(got), got)
	}
	if got := seqs(heldAfter(t, b, "ses_f", 0)); got != "1" {
		t.Fatalf("held %s", got)
	}
}

func testEndedTurnKept(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	publish(t, b, series("ses_a", "turn_1", 1, 9)...)
	publish(t, b, event("ses_a", "turn_1", 10, forge.EventTurnDone, map[string]string{}))
	end(t, b, "ses_a", "turn_1")
	if got := seqs(heldAfter(t, b, "ses_a", 5)); got != "6,7,8,9,10" {
		t.Fatalf("after the turn ended, held after 5: %s", got)
	}
}

// testNextTurnKeepsTail: a subscriber cut off near a turn's end resumes
// after the next turn began and still gets the deltas it missed.
func testNextTurnKeepsTail(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	begin(t, b, "ses_a", "turn_1")
	publish(t, b, series("ses_a", "turn_1", 1, 9)...)
	publish(t, b, event("ses_a", "turn_1", 10, forge.EventTurnDone, map[string]string{}))
	end(t, b, "ses_a", "turn_1")
	begin(t, b, "ses_a", "turn_2")
	publish(t, b, event("ses_a", "turn_2", 11, forge.EventTurnCreated, map[string]string{}))
	publish(t, b, series("ses_a", "turn_2", 12, 13)...)
	if got := seqs(heldAfter(t, b, "ses_a", 7)); got != "8,9,10,11,12,13" {
		t.Fatalf("held after 7 across turns: %s", got)
	}
}

// testCutOffResumes: a subscriber that reads nothing while many events are
// published either gets them all, or an in-order prefix and then
// ErrLagged; resubscribing from its last seq gives exactly the rest.
func testCutOffResumes(t *testing.T, newBus Factory) {
	const buffer = 8
	b := newBus(t, Options{Buffer: buffer})
	begin(t, b, "ses_a", "turn_1")
	_, s := subscribe(t, b, "ses_a", 0)
	const n = 20 * buffer
	publish(t, b, series("ses_a", "turn_1", 1, n)...)
	var got []forge.Event
	for {
		evs, err := s.Next(ctxOf(t), false)
		got = append(got, evs...)
		if errors.Is(err, forge.ErrLagged) {
			last := int64(0)
			if len(got) > 0 {
				last = got[len(got)-1].Seq
			}
			var held []forge.Event
			held, s = subscribe(t, b, "ses_a", last)
			got = append(got, held...)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("got %d events, want %d", len(got), n)
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate", i, ev.Seq)
		}
	}
}

// testTextSoFar: with a bounded backlog, a cursor older than what the bus
// kept gets, per part still streaming, its latest text so far row (the
// event log folds them and publishes them with its events, at least every
// quarter of the backlog bound: Event.TextSoFar, as this test does), then
// the kept deltas after it: the text adds up.
func testTextSoFar(t *testing.T, newBus Factory) {
	b := newBus(t, Options{BacklogMax: 8})
	if bl, ok := b.(forge.Backlogger); !ok || bl.Backlog() != 8 {
		t.Fatalf("the bus does not tell its backlog bound (8)")
	}
	const sess, turn = "ses_t", "turn_1"
	begin(t, b, sess, turn)
	publish(t, b, event(sess, turn, 1, forge.EventTurnCreated, map[string]string{}))
	main := forge.Part{ID: "prt_main", MessageID: "msg_1", Type: forge.PartText, State: forge.StateStreaming}
	child := forge.Part{ID: "prt_child", MessageID: "msg_2", Type: forge.PartReasoning, State: forge.StateStreaming}
	done := forge.Part{ID: "prt_done", MessageID: "msg_1", Type: forge.PartText, State: forge.StateStreaming}
	starts := map[string]forge.Event{"prt_main": partEvent(sess, turn, "thr_main", 2, main),
		"prt_child": partEvent(sess, turn, "thr_child", 3, child), "prt_done": partEvent(sess, turn, "thr_main", 4, done)}
	publish(t, b, starts["prt_main"], starts["prt_child"], starts["prt_done"])
	texts := map[string]string{}
	// The event log's fold: per part, the seq of its last delta and of
	// its oldest delta no row covers.
	lastOf, unfolded := map[string]int64{}, map[string]int64{}
	const quarter = 8 / 4
	seq := int64(5)
	for i := range 40 {
		for _, p := range []string{"prt_main", "prt_child", "prt_done"} {
			d := fmt.Sprintf("%s%d ", p[4:5], i)
			ev := delta(sess, turn, p, seq, d)
			for _, q := range []string{"prt_main", "prt_child", "prt_done"} {
				if unfolded[q] == 0 || seq-unfolded[q] < quarter {
					continue
				}
				row := starts[q]
				var part forge.Part
				if err := json.Unmarshal(row.Data, &part); err != nil {
					t.Fatal(err)
				}
				part.Text = texts[q]
				data, err := json.Marshal(&part)
				if err != nil {
					t.Fatal(err)
				}
				row.Seq, row.Data, row.CreatedAt = lastOf[q], data, time.Unix(1700000000, lastOf[q]).UTC()
				ev.TextSoFar = append(ev.TextSoFar, row)
				unfolded[q] = 0
			}
			publish(t, b, ev)
			texts[p] += d
			lastOf[p] = seq
			if unfolded[p] == 0 {
				unfolded[p] = seq
			}
			seq++
		}
	}
	completed := done
	completed.State, completed.Text = forge.StateCompleted, texts["prt_done"]
	publish(t, b, partEvent(sess, turn, "thr_main", seq, completed))
	last := seq

	for _, cursor := range []int64{1, 20} {
		got := heldAfter(t, b, sess, cursor)
		if len(got) == 0 || got[len(got)-1].Seq != last {
			t.Fatalf("cursor %d: held %s, want it to end at %d", cursor, seqs(got), last)
		}
		rebuilt := map[string]string{}
		rows := 0
		for i, ev := range got {
			if ev.Seq <= cursor || (i > 0 && ev.Seq <= got[i-1].Seq) {
				t.Fatalf("cursor %d: seqs %s", cursor, seqs(got))
			}
			switch ev.Type {
			case forge.EventModelMessage:
				var p forge.Part
				if err := json.Unmarshal(ev.Data, &p); err != nil {
					t.Fatal(err)
				}
				if p.State == forge.StateStreaming {
					rows++
					want := map[string]string{"prt_main": "thr_main", "prt_child": "thr_child"}[p.ID]
					if ev.ThreadID == nil || *ev.ThreadID != want || ev.TurnID == nil || *ev.TurnID != turn || ev.ID != p.ID {
						t.Fatalf("text so far of %s: envelope %+v", p.ID, ev)
					}
				}
				rebuilt[p.ID] = p.Text
			case forge.EventModelDelta:
				var d forge.DeltaData
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					t.Fatal(err)
				}
				rebuilt[ev.ID] += d.Delta
			}
		}
		if rows != 2 {
			t.Fatalf("cursor %d: %d text-so-far rows, want one per part still streaming (2)", cursor, rows)
		}
		for p, want := range texts {
			if rebuilt[p] != want {
				t.Fatalf("cursor %d: %s rebuilt as %q, want %q", cursor, p, rebuilt[p], want)
			}
		}
	}
	// A cursor past every trimmed delta needs no row.
	got := heldAfter(t, b, sess, last-1)
	if seqs(got) != fmt.Sprint(last) {
		t.Fatalf("held after %d: %s", last-1, seqs(got))
	}
}

func testClose(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	_, s := subscribe(t, b, "ses_a", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := s.Next(ctxOf(t), false); !errors.Is(err, forge.ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	// Publishing to a session whose subscribers left works.
	publish(t, b, series("ses_a", "", 1, 2)...)
}

// testConcurrentSubscribers: subscribers reading at their own pace while
// events are published each get every event once, in order (resuming
// after a cut when the bus cuts them off).
func testConcurrentSubscribers(t *testing.T, newBus Factory) {
	b := newBus(t, Options{Buffer: 16})
	ctx := ctxOf(t)
	begin(t, b, "ses_c", "turn_1")
	const n, subs = 2000, 12
	var wg sync.WaitGroup
	ready := make(chan struct{}, subs)
	for i := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, s, err := b.Subscribe(ctx, "ses_c", 0)
			if err != nil {
				t.Error(err)
				return
			}
			ready <- struct{}{}
			var last int64
			for last < n {
				evs, err := s.Next(ctx, true)
				if errors.Is(err, forge.ErrLagged) {
					_ = s.Close()
					if evs, s, err = b.Subscribe(ctx, "ses_c", last); err != nil {
						t.Error(err)
						return
					}
				} else if err != nil {
					t.Errorf("subscriber %d: %v", i, err)
					return
				}
				for _, ev := range evs {
					if ev.Seq != last+1 {
						t.Errorf("subscriber %d: seq %d after %d", i, ev.Seq, last)
						return
					}
					last = ev.Seq
				}
			}
			_ = s.Close()
		}()
	}
	for range subs {
		<-ready
	}
	for seq := int64(1); seq <= n; seq++ {
		publish(t, b, delta("ses_c", "turn_1", "prt_x", seq, "x"))
	}
	wg.Wait()
}

// testEphemeral: an event without a seq reaches the subscribers open when
// it is published (live, waiting for it if need be), never a later one's
// held events, and leaves the seq stream as it was.
func testEphemeral(t *testing.T, newBus Factory) {
	b := newBus(t, Options{})
	ctx := ctxOf(t)
	begin(t, b, "ses_e", "turn_1")
	publish(t, b, series("ses_e", "turn_1", 1, 2)...)
	_, s := subscribe(t, b, "ses_e", 2)
	typing := event("ses_e", "", 0, "forum.typing", map[string]any{"participant_id": "par_1", "typing": true})
	if err := b.PublishEphemeral(ctx, typing); err != nil {
		t.Fatalf("publish ephemeral: %v", err)
	}
	publish(t, b, series("ses_e", "turn_1", 3, 3)...)
	var got []forge.Event
	for len(got) < 2 {
		evs, err := s.Next(ctx, true)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		got = append(got, evs...)
	}
	var eph, seq []forge.Event
	for _, ev := range got {
		if ev.Seq == 0 {
			eph = append(eph, ev)
		} else {
			seq = append(seq, ev)
		}
	}
	if len(eph) != 1 || eph[0].Type != "forum.typing" || eph[0].SessionID != "ses_e" || string(eph[0].Data) != string(typing.Data) {
		t.Fatalf("ephemeral events received: %+v", eph)
	}
	if seqs(seq) != "3" {
		t.Fatalf("seq events around the ephemeral one: %s", seqs(seq))
	}
	if got := seqs(heldAfter(t, b, "ses_e", 0)); got != "1,2,3" {
		t.Fatalf("a later subscriber holds %s: an ephemeral event is never kept", got)
	}
	// Publishing with no subscriber, or with a seq, is not an error /
	// is refused.
	if err := b.PublishEphemeral(ctx, event("ses_none", "", 0, "forum.typing", map[string]any{})); err != nil {
		t.Fatalf("ephemeral to a session nobody reads: %v", err)
	}
	if err := b.PublishEphemeral(ctx, event("ses_e", "", 9, "forum.typing", map[string]any{})); err == nil {
		t.Fatal("an ephemeral event with a seq was accepted")
	}
}
