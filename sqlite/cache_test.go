package sqlite

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/forge-runtime/forge"
)

// Reads that bypass the row cache, for comparison.

func directSession(t *testing.T, s *Store, tenant, id string) (*forge.Session, error) {
	t.Helper()
	ses, err := scanSession(s.queryRow(context.Background(), `SELECT `+sessionCols+` FROM sessions
		WHERE tenant = ? AND id = ? AND deleted_at IS NULL`, tenant, id), tenant)
	if err != nil {
		return nil, notFound(err, "session %s not found", id)
	}
	return ses, nil
}

func directTurn(t *testing.T, s *Store, tenant, session, id string) (*forge.Turn, error) {
	t.Helper()
	turn, err := scanTurn(s.queryRow(context.Background(), `SELECT `+turnCols+` FROM turns t
		JOIN sessions s ON s.tenant = t.tenant AND s.id = t.session_id AND s.deleted_at IS NULL
		WHERE t.tenant = ? AND t.session_id = ? AND t.id = ?`, tenant, session, id))
	if err != nil {
		return nil, notFound(err, "turn %s not found", id)
	}
	return turn, nil
}

func directAgent(t *testing.T, s *Store, tenant, name string) (*forge.Agent, error) {
	t.Helper()
	a, err := scanAgent(s.queryRow(context.Background(), `SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id AND v.version = a.version
		WHERE a.tenant = ? AND a.name = ? AND a.deleted_at IS NULL`, tenant, name), tenant)
	if err != nil {
		return nil, notFound(err, "agent %q not found", name)
	}
	return a, nil
}

// same fails unless the cached and the direct read agree (both errors
// being ErrNotFound counts as agreeing).
func same[T any](t *testing.T, what string, cached T, cerr error, direct T, derr error) {
	t.Helper()
	if cerr != nil || derr != nil {
		if !errors.Is(cerr, forge.ErrNotFound) || !errors.Is(derr, forge.ErrNotFound) {
			t.Errorf("%s: cached read %v, direct read %v", what, cerr, derr)
		}
		return
	}
	if !reflect.DeepEqual(cached, direct) {
		t.Errorf("%s: cached read differs from the database:\ncached: %+v\ndirect: %+v", what, cached, direct)
	}
}

func checkSession(t *testing.T, s *Store, tenant, id string) *forge.Session {
	t.Helper()
	c, cerr := s.GetSession(context.Background(), tenant, id)
	d, derr := directSession(t, s, tenant, id)
	same(t, "session "+id, c, cerr, d, derr)
	return c
}

func checkTurn(t *testing.T, s *Store, tenant, session, id string) *forge.Turn {
	t.Helper()
	c, cerr := s.GetTurn(context.Background(), tenant, session, id)
	d, derr := directTurn(t, s, tenant, session, id)
	same(t, "turn "+id, c, cerr, d, derr)
	return c
}

// endWith ends f's turn with usage; its event takes seq.
func (f *turnFixture) endWith(seq int64, u forge.Usage) func() error {
	t := *f.turn
	t.Status = forge.TurnDone
	t.Usage = u
	t.Output = &forge.TurnOutput{Text: "done"}
	b := &forge.Batch{Tenant: f.ses.Tenant, SessionID: f.ses.ID, TurnID: f.turn.ID, Turn: &t,
		Events: []forge.Event{{Seq: seq, ID: t.ID, Type: forge.EventTurnDone, TurnID: &t.ID, Data: []byte(`{}`)}}}
	return func() error { return f.s.Commit(context.Background(), b) }
}

// TestRowCacheFollowsWrites: after each write the cached reads equal reads
// from the database: the tip a turn moves, the usage its end adds, the
// ended turn, an agent's new version, deletions.
func TestRowCacheFollowsWrites(t *testing.T) {
	t.Parallel()
	s := openT(t)
	ctx := context.Background()
	a := &forge.Agent{Tenant: "acme", Name: "a", Model: "scripted/echo"}
	if err := s.CreateAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "acme", "a"); err != nil || got.Version != 1 {
		t.Fatalf("GetAgent: %+v %v", got, err)
	}
	a.Instructions = "v2"
	if err := s.UpdateAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAgent(ctx, "acme", "a")
	if err != nil || got.Version != 2 || got.Instructions != "v2" {
		t.Fatalf("GetAgent after UpdateAgent: %+v %v; want version 2", got, err)
	}
	d, derr := directAgent(t, s, "acme", "a")
	same(t, "agent", got, err, d, derr)

	f := running(t, s)
	if ses := checkSession(t, s, "acme", f.ses.ID); ses == nil || ses.TipTurnID == nil || *ses.TipTurnID != f.turn.ID {
		t.Fatalf("session after BeginTurn: %+v; want tip %s", ses, f.turn.ID)
	}
	if turn := checkTurn(t, s, "acme", f.ses.ID, f.turn.ID); turn == nil || turn.Status != forge.TurnRunning {
		t.Fatalf("running turn: %+v", turn)
	}
	_, reply := f.reply(2, "hello")
	if err := reply(); err != nil {
		t.Fatal(err)
	}
	checkTurn(t, s, "acme", f.ses.ID, f.turn.ID)
	if err := f.endWith(3, forge.Usage{InputTokens: 10, OutputTokens: 5, Cost: 0.25})(); err != nil {
		t.Fatal(err)
	}
	turn := checkTurn(t, s, "acme", f.ses.ID, f.turn.ID)
	if turn == nil || turn.Status != forge.TurnDone || turn.LastSeq != 3 || turn.Output == nil {
		t.Fatalf("ended turn: %+v", turn)
	}
	ses := checkSession(t, s, "acme", f.ses.ID)
	if ses == nil || ses.Usage.InputTokens != 10 || ses.Usage.Cost != 0.25 {
		t.Fatalf("session usage after the turn: %+v", ses)
	}
	// Another tenant sees none of it.
	if _, err := s.GetSession(ctx, "other", f.ses.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("another tenant's session: %v", err)
	}
	if _, err := s.GetTurn(ctx, "other", f.ses.ID, f.turn.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("another tenant's turn: %v", err)
	}
	if _, err := s.GetTurn(ctx, "acme", "ses_other", f.turn.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("the turn under another session id: %v", err)
	}
	if byID, err := s.GetTurnByID(ctx, "acme", f.turn.ID); err != nil || !reflect.DeepEqual(byID, turn) {
		t.Errorf("GetTurnByID: %+v %v, want %+v", byID, err, turn)
	}
	if _, err := s.GetTurnByID(ctx, "other", f.turn.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("another tenant's turn by id: %v", err)
	}

	if err := s.DeleteSession(ctx, "acme", f.ses.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, "acme", f.ses.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("deleted session: %v", err)
	}
	if _, err := s.GetTurn(ctx, "acme", f.ses.ID, f.turn.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("turn of a deleted session: %v", err)
	}
	if _, err := s.GetTurnByID(ctx, "acme", f.turn.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("turn of a deleted session, by id: %v", err)
	}
	if err := s.DeleteAgent(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAgent(ctx, "acme", "a"); !errors.Is(err, forge.ErrNotFound) {
		t.Errorf("deleted agent: %v", err)
	}
	a2 := &forge.Agent{Tenant: "acme", Name: "a", Model: "scripted/echo", Instructions: "new"}
	if err := s.CreateAgent(ctx, a2); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAgent(ctx, "acme", "a"); err != nil || got.ID != a2.ID {
		t.Errorf("agent re-created under the name: %+v %v, want id %s", got, err, a2.ID)
	}
}

// TestRowCacheServesTheTurnPath: once a turn has ended, the lookups the
// next turn makes (session, agent, the turn it chains from) are answered
// without the database: they still work with the read pool closed.
func TestRowCacheServesTheTurnPath(t *testing.T) {
	t.Parallel()
	s := openT(t)
	ctx := context.Background()
	if err := s.CreateAgent(ctx, &forge.Agent{Tenant: "acme", Name: "a", Model: "scripted/echo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAgent(ctx, "acme", "a"); err != nil {
		t.Fatal(err)
	}
	f := running(t, s)
	// The turn's own lookup of its session caches it; the writes then keep
	// the cached row up to date.
	if _, err := s.GetSession(ctx, "acme", f.ses.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.endWith(2, forge.Usage{OutputTokens: 1})(); err != nil {
		t.Fatal(err)
	}
	if err := s.r.db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, "acme", f.ses.ID); err != nil {
		t.Errorf("GetSession: %v", err)
	}
	if _, err := s.GetAgent(ctx, "acme", "a"); err != nil {
		t.Errorf("GetAgent: %v", err)
	}
	if turn, err := s.GetTurn(ctx, "acme", f.ses.ID, f.turn.ID); err != nil || turn.Status != forge.TurnDone {
		t.Errorf("GetTurn: %+v %v", turn, err)
	}
	if turn, err := s.GetTurnByID(ctx, "acme", f.turn.ID); err != nil || turn.Status != forge.TurnDone {
		t.Errorf("GetTurnByID: %+v %v", turn, err)
	}
}

// TestRowCacheIgnoresFailedWrites: a terminal write that fails after its
// UPDATE has returned the ended row (its event's seq is taken) leaves the
// cache as the database is: the turn still running, the usage not added;
// alone and inside a group written with savepoints.
func TestRowCacheIgnoresFailedWrites(t *testing.T) {
	t.Parallel()
	s := openT(t)
	alone := running(t, s)
	checkSession(t, s, "acme", alone.ses.ID)
	if err := alone.endWith(1, forge.Usage{InputTokens: 7})(); !errors.Is(err, forge.ErrConflict) {
		t.Fatalf("terminal write with a used seq: %v, want ErrConflict", err)
	}
	if turn := checkTurn(t, s, "acme", alone.ses.ID, alone.turn.ID); turn.Status != forge.TurnRunning {
		t.Errorf("after the failed terminal write: %s", turn.Status)
	}
	if ses := checkSession(t, s, "acme", alone.ses.ID); ses.Usage.InputTokens != 0 {
		t.Errorf("usage of a failed terminal write: %+v", ses.Usage)
	}

	// Inside a group written with savepoints: the calls are queued behind
	// a held writer, in a synctest bubble.
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		grouped := running(t, s)
		other := running(t, s)
		checkSession(t, s, "acme", grouped.ses.ID)
		errs := queueOrdered(t, s, []func() error{
			other.endWith(2, forge.Usage{InputTokens: 3}),
			grouped.endWith(1, forge.Usage{InputTokens: 7}), // seq 1 is taken
		})
		if errs[0] != nil || !errors.Is(errs[1], forge.ErrConflict) {
			t.Fatalf("group: %v", errs)
		}
		if turn := checkTurn(t, s, "acme", grouped.ses.ID, grouped.turn.ID); turn.Status != forge.TurnRunning {
			t.Errorf("after the failed terminal write in a group: %s", turn.Status)
		}
		if ses := checkSession(t, s, "acme", grouped.ses.ID); ses.Usage.InputTokens != 0 {
			t.Errorf("usage of a failed terminal write in a group: %+v", ses.Usage)
		}
		if turn := checkTurn(t, s, "acme", other.ses.ID, other.turn.ID); turn.Status != forge.TurnDone {
			t.Errorf("the group's other turn: %s", turn.Status)
		}
		checkSession(t, s, "acme", other.ses.ID)
	})
}

// TestRowCacheFillLosesToWrites: a read that missed and began before a
// write put or dropped a row must not put back what it read.
func TestRowCacheFillLosesToWrites(t *testing.T) {
	t.Parallel()
	c := newRowCache()
	old, fresh := []any{"old"}, []any{"fresh"}
	e := c.begin()
	c.putSession("t", "s", fresh)
	c.fillSession(e, "t", "s", old)
	if v, _ := c.session("t", "s"); !reflect.DeepEqual(v, fresh) {
		t.Errorf("session: %v, want the written row", v)
	}
	e = c.begin()
	c.dropSession("t", "s")
	c.fillSession(e, "t", "s", old)
	c.fillTurn(e, "t", "s", "turn", old)
	if _, ok := c.session("t", "s"); ok {
		t.Error("a dropped session came back")
	}
	e = c.begin()
	c.dropAgent("t", "a")
	c.fillAgent(e, "t", "a", &forge.Agent{Name: "a"})
	if _, ok := c.agent("t", "a"); ok {
		t.Error("a dropped agent came back")
	}
	// A fill with nothing in between lands; a turn needs its session.
	e = c.begin()
	c.fillTurn(e, "t", "s", "turn", old)
	if _, ok := c.turn("t", "s", "turn"); ok {
		t.Error("a turn served without its session")
	}
	c.fillSession(e, "t", "s", fresh)
	if _, ok := c.turn("t", "s", "turn"); !ok {
		t.Error("a filled turn of a cached session missed")
	}
	// Bounded.
	for i := range maxCachedSessions + 10 {
		c.putSession("t", fmt.Sprint(i), fresh)
	}
	if n := len(c.sessions); n > maxCachedSessions {
		t.Errorf("%d sessions cached, bound %d", n, maxCachedSessions)
	}
}

// TestRowCacheUnderConcurrency: turns begun and ended on several sessions
// while readers read them; at the end every cached read equals the
// database (run with -race).
func TestRowCacheUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := openT(t)
	ctx := context.Background()
	const sessions, turns = 4, 15
	ids := make([]string, sessions)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range sessions {
		ses := &forge.Session{ID: s.ids.New(forge.PrefixSession), Tenant: "acme", Agent: "a", MainThreadID: "thr_1"}
		if err := s.CreateSession(ctx, ses); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReserveSeqs(ctx, "acme", ses.ID, 10000); err != nil {
			t.Fatal(err)
		}
		ids[i] = ses.ID
	}
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, id := range ids {
					ses, err := s.GetSession(ctx, "acme", id)
					if err != nil {
						t.Error(err)
						return
					}
					if ses.TipTurnID != nil {
						if _, err := s.GetTurn(ctx, "acme", id, *ses.TipTurnID); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}
		})
	}
	var writers sync.WaitGroup
	for i, id := range ids {
		writers.Go(func() {
			seq := int64(1)
			var prev *string
			for range turns {
				turn := &forge.Turn{ID: s.ids.New(forge.PrefixTurn), Tenant: "acme", SessionID: id, AgentID: "ag", AgentVersion: 1, PreviousTurnID: prev}
				ev := forge.Event{Seq: seq, ID: turn.ID, Type: forge.EventTurnCreated, TurnID: &turn.ID, Data: []byte(`{}`)}
				if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, Events: []forge.Event{ev}}); err != nil {
					t.Error(err)
					return
				}
				f := &turnFixture{s: s, ses: &forge.Session{ID: id, Tenant: "acme"}, turn: turn}
				if err := f.endWith(seq+1, forge.Usage{InputTokens: int64(i + 1), Cost: 0.5})(); err != nil {
					t.Error(err)
					return
				}
				seq += 2
				prev = &turn.ID
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	for i, id := range ids {
		ses := checkSession(t, s, "acme", id)
		if want := int64((i + 1) * turns); ses.Usage.InputTokens != want || ses.Usage.Cost != 0.5*turns {
			t.Errorf("session %d usage %+v, want %d input tokens", i, ses.Usage, want)
		}
		checkTurn(t, s, "acme", id, *ses.TipTurnID)
	}
}

// TestRowCacheSessionChangesInOneGroup: the session writes of a turn (its
// end adds usage, the next turn's creation moves the tip) change the cached
// row without reading it back; in one group commit, each applies to what
// the earlier ones left, and a failed call of the group changes nothing.
func TestRowCacheSessionChangesInOneGroup(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := openT(t)
		ctx := context.Background()
		f := running(t, s)
		checkSession(t, s, "acme", f.ses.ID) // cached
		next := &forge.Turn{ID: s.ids.New(forge.PrefixTurn), Tenant: "acme", SessionID: f.ses.ID, AgentID: "ag_1",
			AgentVersion: 1, PreviousTurnID: &f.turn.ID}
		begin := func() error {
			ev := forge.Event{Seq: 3, ID: next.ID, Type: forge.EventTurnCreated, TurnID: &next.ID, Data: []byte(`{}`)}
			return s.BeginTurn(ctx, &forge.BeginTurn{Turn: next, Events: []forge.Event{ev}})
		}
		unknown := &turnFixture{s: s, ses: f.ses, turn: &forge.Turn{ID: "turn_unknown", Tenant: "acme", SessionID: f.ses.ID}}
		c1, c2 := 0.1, 0.2 // summed as float64s, as SQLite does
		errs := queueOrdered(t, s, []func() error{
			f.endWith(2, forge.Usage{InputTokens: 7, OutputTokens: 3, CacheReadTokens: 2, Cost: c1}),
			unknown.endWith(4, forge.Usage{InputTokens: 1000, Cost: 9}), // fails: no such turn
			begin,
		})
		if errs[0] != nil || errs[1] == nil || errs[2] != nil {
			t.Fatalf("errors %v; want only the second call's", errs)
		}
		ses := checkSession(t, s, "acme", f.ses.ID)
		if ses == nil || ses.TipTurnID == nil || *ses.TipTurnID != next.ID || ses.Usage.InputTokens != 7 ||
			ses.Usage.CacheReadTokens != 2 || ses.Usage.Cost != c1 {
			t.Fatalf("session after the group: %+v", ses)
		}
		if vals, ok := s.rc.session("acme", f.ses.ID); !ok || vals[sessionTipCol] != next.ID {
			t.Fatalf("the session's row left the cache (%v): its changes should have been applied", vals)
		}
		// And once more, each alone.
		if err := (&turnFixture{s: s, ses: f.ses, turn: next}).endWith(4, forge.Usage{InputTokens: 1, Cost: c2})(); err != nil {
			t.Fatal(err)
		}
		if ses := checkSession(t, s, "acme", f.ses.ID); ses.Usage.InputTokens != 8 || ses.Usage.Cost != c1+c2 {
			t.Fatalf("session usage after another turn: %+v", ses.Usage)
		}
	})
}

// TestAddUsageRefusesOtherTypes: a cached usage value of another type than
// the columns hold drops the row rather than guess.
func TestAddUsageRefusesOtherTypes(t *testing.T) {
	vals := []any{int64(1), int64(2), int64(3), int64(4), int64(5), 0.5}
	if !addUsage(vals, forge.Usage{InputTokens: 1, OutputTokens: 1, ReasoningTokens: 1, CacheReadTokens: 1, CacheWriteTokens: 1, Cost: 0.25}) {
		t.Fatal("addUsage refused the driver's types")
	}
	if want := []any{int64(2), int64(3), int64(4), int64(5), int64(6), 0.75}; !reflect.DeepEqual(vals, want) {
		t.Fatalf("got %v, want %v", vals, want)
	}
	if addUsage([]any{int64(1), int64(2), int64(3), int64(4), int64(5), int64(0)}, forge.Usage{Cost: 1}) {
		t.Fatal("addUsage accepted an integer cost")
	}
	if addUsage([]any{"1", int64(2), int64(3), int64(4), int64(5), 0.5}, forge.Usage{Cost: 1}) {
		t.Fatal("addUsage accepted a text token count")
	}
}

// TestRowCacheAgentsAreCopies: the cache keeps agents decoded and hands
// out copies: a caller changing the agent it got changes nobody else's.
func TestRowCacheAgentsAreCopies(t *testing.T) {
	t.Parallel()
	s := openT(t)
	ctx := context.Background()
	a := &forge.Agent{Tenant: "acme", Name: "a", Model: "scripted/echo", Tools: []forge.ToolSpec{{Name: "t", InputSchema: []byte(`{"type":"object"}`)}},
		Approval: map[string]string{"t": "always"}, Subagents: []string{"b"}}
	if err := s.CreateAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	first, err := s.GetAgent(ctx, "acme", "a") // fills the cache
	if err != nil {
		t.Fatal(err)
	}
	first.Instructions = "changed"
	first.Tools[0].InputSchema[2] = 'X'
	first.Approval["t"] = "never"
	first.Subagents[0] = "z"
	for range 2 {
		got, err := s.GetAgent(ctx, "acme", "a")
		d, derr := directAgent(t, s, "acme", "a")
		same(t, "agent", got, err, d, derr)
		got.Subagents[0] = "y"
	}
}
