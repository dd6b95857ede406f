package storetest

import (
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

var idempotencyTests = []test{
	{name: "FirstRecordWins", run: func(f *fixture) {
		scope := "POST /v1/sessions/ses_1/turns"
		first := &forge.IdempotencyRecord{Key: "k", Scope: scope, RequestHash: "h1", Status: 200, Body: []byte(`{"id":"turn_1"}`), CreatedAt: f.now()}
		got, err := f.s.PutIdempotency(f.ctx, tenantA, first)
		f.ok(err, "PutIdempotency")
		f.sameJSON(got, first, "stored record")
		second := &forge.IdempotencyRecord{Key: "k", Scope: scope, RequestHash: "h2", Status: 409, Body: []byte(`{"error":{}}`), CreatedAt: f.now()}
		got, err = f.s.PutIdempotency(f.ctx, tenantA, second)
		f.ok(err, "second PutIdempotency")
		f.sameJSON(got, first, "record after a second put")
		got, err = f.s.GetIdempotency(f.ctx, tenantA, scope, "k")
		f.ok(err, "GetIdempotency")
		f.sameJSON(got, first, "read record")

		_, err = f.s.GetIdempotency(f.ctx, tenantA, scope, "other")
		f.is(err, forge.ErrNotFound, "unknown key")
		_, err = f.s.GetIdempotency(f.ctx, tenantA, "POST /v1/sessions/ses_1/cancel", "k")
		f.is(err, forge.ErrNotFound, "same key, other scope")
		// Scopes are independent.
		cancel := &forge.IdempotencyRecord{Key: "k", Scope: "POST /v1/sessions/ses_1/cancel", Status: 200, Body: []byte(`{}`), CreatedAt: f.now()}
		got, err = f.s.PutIdempotency(f.ctx, tenantA, cancel)
		f.ok(err, "PutIdempotency other scope")
		f.sameJSON(got, cancel, "record in the other scope")
	}},
	{name: "PendingRecordIsCompletedOnce", run: func(f *fixture) {
		// A request reserves its key (status 0) before it acts, then
		// records its answer; the first answer stays.
		pending := &forge.IdempotencyRecord{Key: "k", Scope: "s", RequestHash: "h", CreatedAt: f.now(), ExpiresAt: f.now().Add(24 * time.Hour)}
		got, err := f.s.PutIdempotency(f.ctx, tenantA, pending)
		f.ok(err, "PutIdempotency")
		f.sameJSON(got, pending, "pending record")
		eq(f, got.Status, 0, "pending status")

		done, err := f.s.CompleteIdempotency(f.ctx, tenantA, "s", "k", 202, []byte(`{"id":"turn_1"}`))
		f.ok(err, "CompleteIdempotency")
		want := *pending
		want.Status, want.Body = 202, []byte(`{"id":"turn_1"}`)
		f.sameJSON(done, &want, "completed record")
		again, err := f.s.CompleteIdempotency(f.ctx, tenantA, "s", "k", 409, []byte(`{"error":{}}`))
		f.ok(err, "second CompleteIdempotency")
		f.sameJSON(again, &want, "record after a second completion")
		got, err = f.s.GetIdempotency(f.ctx, tenantA, "s", "k")
		f.ok(err, "GetIdempotency")
		f.sameJSON(got, &want, "read record")

		_, err = f.s.CompleteIdempotency(f.ctx, tenantA, "s", "nope", 200, nil)
		f.is(err, forge.ErrNotFound, "completing no record")
		_, err = f.s.CompleteIdempotency(f.ctx, tenantB, "s", "k", 200, nil)
		f.is(err, forge.ErrNotFound, "completing another tenant's record")
		got, err = f.s.GetIdempotency(f.ctx, tenantA, "s", "k")
		f.ok(err, "GetIdempotency after B's attempt")
		f.sameJSON(got, &want, "record after another tenant's completion")
	}},
	{name: "ExpiredRecordIsReplaced", run: func(f *fixture) {
		start := f.now()
		old := &forge.IdempotencyRecord{Key: "k", Scope: "s", RequestHash: "old", Status: 200, Body: []byte(`1`), CreatedAt: start, ExpiresAt: start.Add(time.Hour)}
		_, err := f.s.PutIdempotency(f.ctx, tenantA, old)
		f.ok(err, "PutIdempotency")
		// Before the expiry the old record stands.
		early := &forge.IdempotencyRecord{Key: "k", Scope: "s", RequestHash: "new", CreatedAt: start.Add(time.Hour - time.Millisecond), ExpiresAt: start.Add(2 * time.Hour)}
		got, err := f.s.PutIdempotency(f.ctx, tenantA, early)
		f.ok(err, "PutIdempotency before the expiry")
		f.sameJSON(got, old, "record before the expiry")
		eq(f, got.Live(early.CreatedAt), true, "Live before the expiry")
		// From the expiry on, a new request takes the key.
		late := &forge.IdempotencyRecord{Key: "k", Scope: "s", RequestHash: "new", CreatedAt: start.Add(time.Hour), ExpiresAt: start.Add(2 * time.Hour)}
		eq(f, got.Live(late.CreatedAt), false, "Live at the expiry")
		got, err = f.s.PutIdempotency(f.ctx, tenantA, late)
		f.ok(err, "PutIdempotency at the expiry")
		f.sameJSON(got, late, "record replacing the expired one")
		// A record without expiry binds its key for good.
		forever := &forge.IdempotencyRecord{Key: "f", Scope: "s", RequestHash: "h", Status: 202, CreatedAt: start}
		_, err = f.s.PutIdempotency(f.ctx, tenantA, forever)
		f.ok(err, "PutIdempotency without expiry")
		got, err = f.s.PutIdempotency(f.ctx, tenantA, &forge.IdempotencyRecord{Key: "f", Scope: "s", RequestHash: "x", CreatedAt: start.Add(24 * 365 * time.Hour)})
		f.ok(err, "PutIdempotency a year later")
		f.sameJSON(got, forever, "record without expiry a year later")
		eq(f, got.ExpiresAt.IsZero(), true, "zero ExpiresAt read back")
	}},
	{name: "RacingPutsAgreeOnOneRecord", run: func(f *fixture) {
		const n = 8
		got := make([]*forge.IdempotencyRecord, n)
		errs := make([]error, n)
		now := f.now()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				got[i], errs[i] = f.s.PutIdempotency(f.ctx, tenantA, &forge.IdempotencyRecord{
					Key: "race", Scope: "s", RequestHash: string(rune('a' + i)), CreatedAt: now})
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			f.ok(errs[i], "racing PutIdempotency")
			eq(f, got[i].RequestHash, got[0].RequestHash, "the record every put returned")
		}
	}},
}
