package storeutil_test

import (
	"errors"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var (
	t0  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now = func() time.Time { return t0 }
)

type seqIDs struct{ n int }

func (g *seqIDs) New(prefix string) string {
	g.n++
	return prefix + string(rune('0'+g.n))
}

func TestLimitAndPage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, def, want int }{
		{0, 100, 100}, {-3, 100, 100}, {7, 100, 7}, {storeutil.MaxLimit + 1, 100, storeutil.MaxLimit},
	} {
		if got := storeutil.Limit(c.n, c.def); got != c.want {
			t.Errorf("Limit(%d, %d) = %d, want %d", c.n, c.def, got, c.want)
		}
	}
	id := func(s string) string { return s }
	if got, next := storeutil.Page([]string{"a", "b"}, 2, id); len(got) != 2 || next != "" {
		t.Errorf("a last page: %v, next %q", got, next)
	}
	if got, next := storeutil.Page([]string{"a", "b", "c"}, 2, id); len(got) != 2 || next != "b" {
		t.Errorf("a page with more: %v, next %q", got, next)
	}
	if got := storeutil.EventsBefore(0); got != 1<<63-1 {
		t.Errorf("EventsBefore(0) = %d", got)
	}
	if got := storeutil.EventsBefore(9); got != 9 {
		t.Errorf("EventsBefore(9) = %d", got)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	var nilMap map[string]int
	for _, c := range []struct {
		v    any
		text string
		null bool
	}{
		{nil, "", true}, {nilMap, "", true}, {(*forge.Usage)(nil), "", true},
		{map[string]int{}, "{}", false}, {[]int{}, "[]", false}, {3, "3", false},
	} {
		text, null, err := storeutil.JSON(c.v)
		if err != nil || text != c.text || null != c.null {
			t.Errorf("JSON(%#v) = %q, %v, %v; want %q, %v", c.v, text, null, err, c.text, c.null)
		}
	}
	if _, _, err := storeutil.JSON(func() {}); err == nil {
		t.Error("a func encoded")
	}
}

func TestBeginTurn(t *testing.T) {
	t.Parallel()
	for _, b := range []*forge.BeginTurn{nil, {}, {Turn: &forge.Turn{ID: "turn_1"}}, {Turn: &forge.Turn{SessionID: "ses_1"}}} {
		if _, _, err := storeutil.BeginTurn(b, now); !errors.Is(err, forge.ErrInvalid) {
			t.Errorf("BeginTurn(%+v) = %v, want ErrInvalid", b, err)
		}
	}
	bad := &forge.BeginTurn{Turn: &forge.Turn{ID: "turn_1", SessionID: "ses_1", Status: "paused"}}
	if _, _, err := storeutil.BeginTurn(bad, now); !errors.Is(err, forge.ErrInvalid) {
		t.Errorf("a bad status: %v", err)
	}
	b := &forge.BeginTurn{Turn: &forge.Turn{ID: "turn_1", SessionID: "ses_1", LastSeq: 2},
		Events: []forge.Event{{Seq: 3, Type: forge.EventTurnCreated}, {Seq: 9, Type: forge.EventModelDelta}}}
	turn, evs, err := storeutil.BeginTurn(b, now)
	if err != nil {
		t.Fatal(err)
	}
	if turn.Status != forge.TurnRunning || !turn.CreatedAt.Equal(t0) || turn.LastSeq != 3 || len(evs) != 1 || evs[0].Seq != 3 {
		t.Fatalf("BeginTurn = %+v, %v", turn, evs)
	}
	if b.Turn.Status != "" {
		t.Fatal("BeginTurn changed the caller's turn before it was stored")
	}
	storeutil.Begun(b, &turn)
	if b.Turn.Status != forge.TurnRunning || !b.Turn.CreatedAt.Equal(t0) || b.Turn.LastSeq != 3 {
		t.Fatalf("Begun: %+v", b.Turn)
	}
}

func TestCommit(t *testing.T) {
	t.Parallel()
	for _, b := range []*forge.Batch{
		nil, {TurnID: "turn_1"}, {SessionID: "ses_1"},
		{SessionID: "ses_1", TurnID: "turn_1", Turn: &forge.Turn{ID: "turn_2", Status: forge.TurnDone}},
		{SessionID: "ses_1", TurnID: "turn_1", Turn: &forge.Turn{Status: "paused"}},
	} {
		if _, _, _, err := storeutil.Commit(b, now); !errors.Is(err, forge.ErrInvalid) {
			t.Errorf("Commit(%+v) = %v, want ErrInvalid", b, err)
		}
	}
	b := &forge.Batch{SessionID: "ses_1", TurnID: "turn_1", Turn: &forge.Turn{Status: forge.TurnDone},
		Events: []forge.Event{{Seq: 5, Type: forge.EventTurnDone}}}
	turn, evs, maxSeq, err := storeutil.Commit(b, now)
	if err != nil || turn.EndedAt == nil || !turn.EndedAt.Equal(t0) || len(evs) != 1 || maxSeq != 5 {
		t.Fatalf("Commit = %+v, %v, %d, %v", turn, evs, maxSeq, err)
	}
	storeutil.Committed(b, &turn, 7)
	if b.Turn.LastSeq != 7 || b.Turn.EndedAt == nil {
		t.Fatalf("Committed: %+v", b.Turn)
	}
	running := &forge.Batch{SessionID: "ses_1", TurnID: "turn_1", Turn: &forge.Turn{Status: forge.TurnRunning}}
	if turn, _, _, err := storeutil.Commit(running, now); err != nil || turn.EndedAt != nil {
		t.Fatalf("a running turn: %+v, %v", turn, err)
	}
}

func TestSessions(t *testing.T) {
	t.Parallel()
	if _, err := storeutil.NewSession(nil, &seqIDs{}, now); !errors.Is(err, forge.ErrInvalid) {
		t.Errorf("a nil session: %v", err)
	}
	s, err := storeutil.NewSession(&forge.Session{Tenant: "acme"}, &seqIDs{}, now)
	if err != nil || s.ID != forge.PrefixSession+"1" || s.Kind != forge.KindDirect || !s.CreatedAt.Equal(t0) || !s.UpdatedAt.Equal(t0) {
		t.Fatalf("NewSession = %+v, %v", s, err)
	}
	later := t0.Add(time.Hour)
	s, _ = storeutil.NewSession(&forge.Session{ID: "ses_x", Kind: forge.KindForum, UpdatedAt: later}, &seqIDs{}, now)
	if s.ID != "ses_x" || s.Kind != forge.KindForum || !s.UpdatedAt.Equal(later) {
		t.Fatalf("NewSession kept nothing given: %+v", s)
	}
	if _, err := storeutil.SwapMonologue(&forge.MonologueSwap{New: &forge.Session{}}, now); !errors.Is(err, forge.ErrInvalid) {
		t.Errorf("a swap without the old monologue: %v", err)
	}
	m, err := storeutil.SwapMonologue(&forge.MonologueSwap{Tenant: "acme", OldID: "ses_old",
		New: &forge.Session{ID: "ses_new", UpdatedAt: later}}, now)
	if err != nil || m.Tenant != "acme" || !m.CreatedAt.Equal(t0) || !m.UpdatedAt.Equal(t0) {
		t.Fatalf("SwapMonologue = %+v, %v", m, err)
	}
}

func TestRowChecks(t *testing.T) {
	t.Parallel()
	invalid := map[string]error{
		"a nil message":                  storeutil.CheckMessage(nil),
		"a message without id":           storeutil.CheckMessage(&forge.Message{}),
		"an event without seq":           storeutil.CheckEvent(&forge.Event{Type: "x"}),
		"an event without type":          storeutil.CheckEvent(&forge.Event{Seq: 1}),
		"no agent name":                  storeutil.CheckAgent(&forge.Agent{}),
		"no idempotency key":             storeutil.CheckIdempotency(&forge.IdempotencyRecord{}),
		"no answer status":               storeutil.CheckCompletion(0),
		"a negative reserve":             storeutil.CheckReserve(-1),
		"a stint without actor":          storeutil.CheckParticipant(&forge.Participant{ID: "par_1", ForumID: "ses_1"}),
		"a loose append without session": storeutil.CheckLoose(&forge.LooseAppend{}),
	}
	for what, err := range invalid {
		if !errors.Is(err, forge.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", what, err)
		}
	}
	if err := storeutil.TurnKey(""); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("an empty turn key: %v", err)
	}
	if mid, err := storeutil.PartMessage(&forge.Part{ID: "prt_1", MessageID: "msg_1"}, "msg_2"); err != nil || mid != "msg_2" {
		t.Errorf("PartMessage with a message id = %q, %v", mid, err)
	}
	if mid, err := storeutil.PartMessage(&forge.Part{ID: "prt_1", MessageID: "msg_1"}, ""); err != nil || mid != "msg_1" {
		t.Errorf("PartMessage = %q, %v", mid, err)
	}
	if _, err := storeutil.PartMessage(&forge.Part{ID: "prt_1"}, ""); !errors.Is(err, forge.ErrInvalid) {
		t.Errorf("a part without message: %v", err)
	}
}

func TestAgentAndKey(t *testing.T) {
	t.Parallel()
	a, err := storeutil.NewAgent(&forge.Agent{Name: "helper", Version: 4}, &seqIDs{}, t0)
	if err != nil || a.ID != forge.PrefixAgent+"1" || a.Version != 1 || !a.CreatedAt.Equal(t0) {
		t.Fatalf("NewAgent = %+v, %v", a, err)
	}
	got, err := storeutil.Agent([]byte(`{"name":"stale","model":"m"}`), "ag_1", "acme", "helper", 2, t0, t0.Add(time.Hour))
	if err != nil || got.Name != "helper" || got.Tenant != "acme" || got.Version != 2 || got.Model != "m" {
		t.Fatalf("Agent = %+v, %v", got, err)
	}
	if _, err := storeutil.Agent([]byte(`{`), "ag_1", "acme", "helper", 2, t0, t0); err == nil {
		t.Fatal("a corrupt definition decoded")
	}
	k, secret, hash, err := storeutil.NewKey(&seqIDs{}, t0, "acme", "ops")
	if err != nil || k.Tenant != "acme" || k.ID != forge.PrefixKey+"1" || string(hash) != string(forge.HashAPIKey(secret)) {
		t.Fatalf("NewKey = %+v, %q, %v", k, secret, err)
	}
	if _, _, _, err := storeutil.NewKey(&seqIDs{}, t0, "bad tenant", "ops"); !errors.Is(err, forge.ErrInvalid) {
		t.Fatalf("a bad tenant: %v", err)
	}
}

func TestBoundary(t *testing.T) {
	t.Parallel()
	b, err := storeutil.Boundary("msg_req", "msg_sum", nil)
	if err != nil || b.TailStartID != "msg_req" || b.SummaryID != "msg_sum" {
		t.Fatalf("no data: %+v, %v", b, err)
	}
	b, err = storeutil.Boundary("msg_req", "msg_sum", []byte(`{"tail_start_message_id":"msg_tail"}`))
	if err != nil || b.TailStartID != "msg_tail" {
		t.Fatalf("a tail: %+v, %v", b, err)
	}
	if _, err := storeutil.Boundary("msg_req", "msg_sum", []byte(`{`)); err == nil {
		t.Fatal("corrupt data decoded")
	}
}

func TestWriteTimer(t *testing.T) {
	t.Parallel()
	var w storeutil.WriteTimer
	boom := errors.New("boom")
	if err := w.Time(func() error { return boom }); err != boom {
		t.Fatalf("without an observer: %v", err)
	}
	var seen []error
	w.Set(func(d time.Duration, err error) { seen = append(seen, err) })
	if err := w.Time(func() error { return boom }); err != boom || len(seen) != 1 || seen[0] != boom {
		t.Fatalf("observed %v, returned %v", seen, err)
	}
	w.Set(nil)
	_ = w.Time(func() error { return nil })
	if len(seen) != 1 {
		t.Fatalf("observed after Set(nil): %v", seen)
	}
}
