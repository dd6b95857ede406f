package storetest

import (
	"slices"
	"time"

	"github.com/forge-runtime/forge"
)

// leases returns the store's LeaseStore; the Leases group runs only for
// stores that have one (distributed mode).
func (f *fixture) leases() forge.LeaseStore {
	f.Helper()
	ls, ok := f.s.(forge.LeaseStore)
	if !ok {
		f.Skip("store has no LeaseStore")
	}
	return ls
}

// startLeased begins a running turn whose lease owner holds for ttl.
func (f *fixture) startLeased(ses *forge.Session, owner string, ttl time.Duration) *forge.Turn {
	f.Helper()
	t := f.newTurn(ses, ses.TipTurnID)
	seq := f.seqs(ses, 1)[0]
	t.LastSeq = seq
	var lease *forge.Lease
	if owner != "" {
		lease = &forge.Lease{Owner: owner, TTL: ttl}
	}
	f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t, Events: []forge.Event{f.event(t, seq, forge.EventTurnCreated, t.ID, t)}, Lease: lease}), "BeginTurn")
	ses.TipTurnID = &t.ID
	return t
}

func ref(t *forge.Turn) forge.TurnRef {
	return forge.TurnRef{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID}
}

func (f *fixture) expired(ls forge.LeaseStore) []string {
	f.Helper()
	ts, err := ls.ExpiredTurns(f.ctx)
	f.ok(err, "ExpiredTurns")
	var ids []string
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	slices.Sort(ids)
	return ids
}

// waitExpired waits (on the store's clock) until ExpiredTurns lists id.
func (f *fixture) waitExpired(ls forge.LeaseStore, id string) {
	f.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(f.expired(ls), id) {
		if time.Now().After(deadline) {
			f.Fatalf("the lease of %s did not expire", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) renew(ls forge.LeaseStore, owner string, ttl time.Duration, ts ...*forge.Turn) []string {
	f.Helper()
	var refs []forge.TurnRef
	for _, t := range ts {
		refs = append(refs, ref(t))
	}
	held, err := ls.RenewLeases(f.ctx, owner, ttl, refs)
	f.ok(err, "RenewLeases")
	slices.Sort(held)
	return held
}

var leaseTests = []test{
	{name: "HeldLeaseIsNotExpired", run: func(f *fixture) {
		ls := f.leases()
		ses := f.newSession(tenantA)
		t := f.startLeased(ses, "replica-a", time.Minute)
		if got := f.expired(ls); slices.Contains(got, t.ID) {
			f.Fatalf("a turn whose lease is held is listed as expired: %v", got)
		}
		eq(f, len(f.renew(ls, "replica-a", time.Minute, t)), 1, "leases renewed by their owner")
		eq(f, len(f.renew(ls, "replica-b", time.Minute, t)), 0, "leases renewed by another replica")
		taken, err := ls.TakeLease(f.ctx, ref(t), "replica-b", time.Minute)
		f.ok(err, "TakeLease")
		eq(f, taken, false, "took a held lease")
		// The owner's batches pass its fence; another's do not.
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Owner: "replica-a"}), "owner's batch")
		err = f.s.Commit(f.ctx, &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Owner: "replica-b"})
		f.is(err, forge.ErrTurnEnded, "batch of a replica without the lease")
	}},
	{name: "ExpiredLeaseIsTakenOnce", run: func(f *fixture) {
		ls := f.leases()
		ses := f.newSession(tenantA)
		t := f.startLeased(ses, "replica-a", 50*time.Millisecond)
		f.waitExpired(ls, t.ID)
		// Several replicas race for it: exactly one wins.
		wins := 0
		for _, owner := range []string{"replica-b", "replica-c", "replica-b"} {
			taken, err := ls.TakeLease(f.ctx, ref(t), owner, time.Minute)
			f.ok(err, "TakeLease")
			if taken {
				wins++
			}
		}
		eq(f, wins, 1, "replicas that took the expired lease")
		if slices.Contains(f.expired(ls), t.ID) {
			f.Fatal("a taken lease is still listed as expired")
		}
		// The old owner lost it: its renewal holds nothing, its late
		// write loses, and writes nothing.
		eq(f, len(f.renew(ls, "replica-a", time.Minute, t)), 0, "leases the old owner still holds")
		late := f.event(t, f.seqs(ses, 1)[0], forge.EventMessageCreated, "msg_late", map[string]string{})
		err := f.s.Commit(f.ctx, &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Owner: "replica-a", Events: []forge.Event{late}})
		f.is(err, forge.ErrTurnEnded, "late write of the old owner")
		if evs := f.events(ses, forge.EventQuery{}); len(evs) != 1 {
			f.Fatalf("the lost write left events: %d", len(evs))
		}
		// The new owner ends the turn; the lease goes with it.
		seq := f.seqs(ses, 1)[0]
		t.Status, t.CancelReason, t.EndedAt, t.LastSeq = forge.TurnCancelled, ptr(forge.CancelAbandoned), ptr(f.now()), seq
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Owner: "replica-b", Turn: t,
			Events: []forge.Event{f.event(t, seq, forge.EventTurnDone, t.ID, t)}}), "terminal write of the new owner")
		taken, err := ls.TakeLease(f.ctx, ref(t), "replica-c", time.Minute)
		f.ok(err, "TakeLease of an ended turn")
		eq(f, taken, false, "took the lease of an ended turn")
		if slices.Contains(f.expired(ls), t.ID) {
			f.Fatal("an ended turn is listed")
		}
	}},
	{name: "RenewalKeepsALease", run: func(f *fixture) {
		ls := f.leases()
		ses := f.newSession(tenantA)
		t := f.startLeased(ses, "replica-a", 300*time.Millisecond)
		for range 4 {
			time.Sleep(100 * time.Millisecond)
			eq(f, len(f.renew(ls, "replica-a", 300*time.Millisecond, t)), 1, "renewed")
			if slices.Contains(f.expired(ls), t.ID) {
				f.Fatal("a lease renewed in time expired")
			}
		}
		// An expired lease nobody took is still its owner's to renew.
		f.waitExpired(ls, t.ID)
		eq(f, len(f.renew(ls, "replica-a", time.Minute, t)), 1, "renewed after expiry, before a takeover")
		if slices.Contains(f.expired(ls), t.ID) {
			f.Fatal("a renewed lease is listed as expired")
		}
	}},
	{name: "TurnWithoutLeaseIsExpired", run: func(f *fixture) {
		ls := f.leases()
		ses := f.newSession(tenantA)
		t := f.startLeased(ses, "", 0) // begun by a replica without leases
		if !slices.Contains(f.expired(ls), t.ID) {
			f.Fatal("a running turn without a lease is not listed")
		}
		taken, err := ls.TakeLease(f.ctx, ref(t), "replica-b", time.Minute)
		f.ok(err, "TakeLease")
		eq(f, taken, true, "took the lease of a turn that had none")
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Owner: "replica-b"}), "new owner's batch")
	}},
	{name: "LeasesAcrossTenants", run: func(f *fixture) {
		ls := f.leases()
		a := f.startLeased(f.newSession(tenantA), "replica-a", 50*time.Millisecond)
		b := f.startLeased(f.newSession(tenantB), "replica-a", 50*time.Millisecond)
		f.waitExpired(ls, a.ID)
		f.waitExpired(ls, b.ID)
		ts, err := ls.ExpiredTurns(f.ctx)
		f.ok(err, "ExpiredTurns")
		for _, t := range ts {
			if t.Status != forge.TurnRunning || (t.ID == a.ID && t.Tenant != tenantA) || (t.ID == b.ID && t.Tenant != tenantB) {
				f.Fatalf("expired turn %+v", t)
			}
		}
		// A reference naming the wrong tenant renews and takes nothing.
		wrong := ref(b)
		wrong.Tenant = tenantA
		held, err := ls.RenewLeases(f.ctx, "replica-a", time.Minute, []forge.TurnRef{ref(a), wrong})
		f.ok(err, "RenewLeases")
		eq(f, len(held), 1, "leases renewed")
		taken, err := ls.TakeLease(f.ctx, wrong, "replica-b", time.Minute)
		f.ok(err, "TakeLease")
		eq(f, taken, false, "took another tenant's turn")
		taken, err = ls.TakeLease(f.ctx, ref(b), "replica-b", time.Minute)
		f.ok(err, "TakeLease")
		eq(f, taken, true, "took the expired lease with its tenant")
	}},
}
