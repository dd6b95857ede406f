package eventlog_test

import (
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/eventlog"
)

// TestATurnBeginClaimsItsSeqs: a turn begun with the session's reserved
// bound as read (BeginTurn.SeqsRead), by a Log with no seq block for the
// session, reserves its block in its own write (forge.SeqClaim): no
// reservation of its own. When another process reserved since the read,
// the claim fails, writing nothing, and the turn is begun again above what
// that process reserved, each event stored once.
func TestATurnBeginClaimsItsSeqs(t *testing.T) {
	t.Parallel()
	const block = 8
	f := newFixture(t, eventlog.Config{SeqBlock: block}, bus.Options{})
	tenant, sid := forge.DefaultTenant, f.sess.ID
	begin := func(read int64) (*forge.Turn, []forge.Event) {
		t.Helper()
		tr := &forge.Turn{ID: f.ids.New(forge.PrefixTurn), Tenant: tenant, SessionID: sid, AgentID: "ag", AgentVersion: 1,
			Status: forge.TurnRunning, Input: []forge.Input{}, RequiredActions: []forge.RequiredAction{}, CreatedAt: time.Now().UTC()}
		evs, err := f.log.BeginPrepared(f.ctx, tenant, &forge.BeginTurn{Turn: tr, SeqsRead: &read},
			eventlog.Draft{Type: forge.EventTurnCreated, ID: tr.ID, TurnID: tr.ID, Data: tr})
		if err != nil {
			t.Fatal(err)
		}
		return tr, evs
	}
	read, err := f.store.Store.ReserveSeqs(f.ctx, tenant, sid, 3)
	if err != nil {
		t.Fatal(err)
	}

	t1, evs := begin(read)
	if evs[0].Seq != read+1 || f.store.reserves.Load() != 0 {
		t.Fatalf("claimed: seq %d, %d reservations; want %d, 0", evs[0].Seq, f.store.reserves.Load(), read+1)
	}
	if ev := f.end(&turn{Turn: t1}); ev.Seq != read+2 {
		t.Fatalf("the next event of the claimed block: seq %d, want %d", ev.Seq, read+2)
	}

	// Another process reserved after this one read the bound.
	f.log = f.newLog(eventlog.Config{SeqBlock: block})
	read += block
	other, err := f.store.Store.ReserveSeqs(f.ctx, tenant, sid, 5)
	if err != nil {
		t.Fatal(err)
	}
	t2, evs := begin(read)
	if evs[0].Seq <= other || f.store.reserves.Load() != 1 {
		t.Fatalf("a lost claim: seq %d, %d reservations; want above %d, 1", evs[0].Seq, f.store.reserves.Load(), other)
	}
	stored, err := f.store.ListEvents(f.ctx, tenant, forge.EventQuery{SessionID: sid, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var created []int64
	for _, ev := range stored {
		if ev.Type == forge.EventTurnCreated && *ev.TurnID == t2.ID {
			created = append(created, ev.Seq)
		}
	}
	if len(created) != 1 || created[0] != evs[0].Seq {
		t.Fatalf("turn.created of the second turn stored at seqs %v, want [%d]", created, evs[0].Seq)
	}
	if got, err := f.store.GetTurn(f.ctx, tenant, sid, t2.ID); err != nil || got.LastSeq != evs[0].Seq {
		t.Fatalf("the second turn: %+v, %v", got, err)
	}
}
