package sqlite

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
)

func init() {
	// In place: the packer's goroutine may be using the cache.
	forgetDictionaries = func(s *Store) { s.dicts.Clear() }
}

// endedTurns writes n turns on a new session of s, each begun and ended
// with a reply, and returns the session and the log as written.
func endedTurns(t *testing.T, s *Store, n int) (*forge.Session, []forge.Event) {
	t.Helper()
	ctx := context.Background()
	ses := &forge.Session{Tenant: forge.DefaultTenant, Agent: "a"}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tick := func() time.Time { at = at.Add(time.Millisecond + 7); return at }
	var log []forge.Event
	var prev *string
	for range n {
		hi, err := s.ReserveSeqs(ctx, ses.Tenant, ses.ID, 5)
		if err != nil {
			t.Fatal(err)
		}
		seq := hi - 5
		turn := &forge.Turn{ID: s.ids.New(forge.PrefixTurn), Tenant: ses.Tenant, SessionID: ses.ID, PreviousTurnID: prev,
			AgentID: "ag", AgentVersion: 1, Status: forge.TurnRunning, Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}},
			CreatedAt: tick()}
		user := &forge.Message{ID: s.ids.New(forge.PrefixMessage), SessionID: ses.ID, TurnID: turn.ID, ThreadID: "thr",
			Role: forge.RoleUser, CreatedAt: tick()}
		user.Parts = []*forge.Part{{ID: s.ids.New(forge.PrefixPart), MessageID: user.ID, Type: forge.PartText, Text: "hi",
			State: forge.StateCompleted, CreatedAt: tick(), UpdatedAt: at}}
		ev := func(typ, id string, v any) forge.Event {
			seq++
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return forge.Event{Seq: seq, ID: id, Type: typ, SessionID: ses.ID, TurnID: &turn.ID, CreatedAt: tick(), Data: b}
		}
		begin := []forge.Event{ev(forge.EventTurnCreated, turn.ID, turn), ev(forge.EventMessageCreated, user.ID, user)}
		if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, Messages: []*forge.Message{user}, Events: begin}); err != nil {
			t.Fatal(err)
		}
		reply := &forge.Message{ID: s.ids.New(forge.PrefixMessage), SessionID: ses.ID, TurnID: turn.ID, ThreadID: "thr",
			Role: forge.RoleAssistant, CreatedAt: tick()}
		text := &forge.Part{ID: s.ids.New(forge.PrefixPart), MessageID: reply.ID, Type: forge.PartText, State: forge.StateStreaming,
			CreatedAt: tick(), UpdatedAt: at}
		started := ev(forge.EventModelMessage, text.ID, text)
		text.Text, text.State, text.UpdatedAt = "hello", forge.StateCompleted, tick()
		reply.Parts = []*forge.Part{text}
		done := *turn
		done.Status, done.EndedAt = forge.TurnDone, ptr(tick())
		end := []forge.Event{started, ev(forge.EventMessageUpdated, reply.ID, reply)}
		done.LastSeq = seq + 1
		end = append(end, ev(forge.EventTurnDone, turn.ID, &done))
		if err := s.Commit(ctx, &forge.Batch{Tenant: ses.Tenant, SessionID: ses.ID, TurnID: turn.ID, Turn: &done,
			Messages: []*forge.Message{reply}, Parts: []*forge.Part{text}, Events: end}); err != nil {
			t.Fatal(err)
		}
		log = append(append(log, begin...), end...)
		prev = &turn.ID
	}
	return ses, log
}

func openPacks(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.r.db.QueryRow(`SELECT count(*) FROM event_log WHERE turn_id IS NOT NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func sameLog(t *testing.T, s *Store, ses *forge.Session, want []forge.Event, what string) {
	t.Helper()
	got, err := s.ListEvents(context.Background(), ses.Tenant, forge.EventQuery{SessionID: ses.ID})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := wireOf(t, got), wireOf(t, want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: log\n%v\nwant\n%v", what, g, w)
	}
}

// TestPackerSweepsAfterACrash: turns that ended while nothing packed them
// (a crash right after their terminal writes) are packed by the next
// Open, and read back the same before and after.
func TestPackerSweepsAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	s, err := openStore(ctx, path, func(s *Store) { s.noPacker = true })
	if err != nil {
		t.Fatal(err)
	}
	ses, log := endedTurns(t, s, 3)
	if n := openPacks(t, s); n != 6 {
		t.Fatalf("%d packs wait, want 6 (2 per turn)", n)
	}
	sameLog(t, s, ses, log, "unpacked")
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = openStore(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	for deadline := time.Now().Add(20 * time.Second); openPacks(t, s) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the packer left %d packs waiting (last error %v)", openPacks(t, s), s.pk.LastErr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var packs int
	if err := s.r.db.QueryRow(`SELECT count(*) FROM event_log`).Scan(&packs); err != nil || packs != 3 {
		t.Fatalf("%d packs after packing, want one per turn (%v)", packs, err)
	}
	sameLog(t, s, ses, log, "packed")
	forgetDictionaries(s)
	sameLog(t, s, ses, log, "packed, read from the rows")
}

// TestCloseDrainsThePacker: a clean shutdown leaves a packed log.
func TestCloseDrainsThePacker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "forge.db")
	s, err := openStore(ctx, path, func(s *Store) { s.packDelay = time.Hour })
	if err != nil {
		t.Fatal(err)
	}
	ses, log := endedTurns(t, s, 2)
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = openStore(ctx, path, func(s *Store) { s.noPacker = true })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	if n := openPacks(t, s); n != 0 {
		t.Fatalf("%d packs wait after a clean shutdown", n)
	}
	sameLog(t, s, ses, log, "drained")
	var body []byte
	if err := s.r.db.QueryRow(`SELECT body FROM event_log LIMIT 1`).Scan(&body); err != nil {
		t.Fatal(err)
	}
	h, err := eventpack.ReadHeader(body)
	if err != nil || len(h.Refs) != 1 || h.Refs[0].Kind != eventpack.RefWholeTurn || h.Count != 5 {
		t.Fatalf("a packed turn's header: %+v, %v", h, err)
	}
}
