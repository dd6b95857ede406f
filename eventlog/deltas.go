package eventlog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/forge-runtime/forge"
)

// PublishDelta gives a bus-only event (a model.message.delta) its seq and
// publishes it. Its error is the seq reservation's (or, with a Fence, the
// hold's): a bus failure is logged, and with a Fence the delta is
// published once the bus is back, before anything after it.
func (l *Log) PublishDelta(ctx context.Context, tenant, sessionID string, d Draft) (forge.Event, error) {
	sq := l.sequencer(tenant, sessionID)
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if l.fence != nil {
		if err := l.drainLocked(ctx, sq); err != nil {
			sq.outMu.Lock()
			queued := len(sq.out)
			sq.outMu.Unlock()
			if queued > 0 {
				return forge.Event{}, fmt.Errorf("publish delta: %w: %w", forge.ErrStore, err)
			}
		}
		evs, err := l.publishQueuedLocked(ctx, sq, []Draft{d})
		var be busError
		if errors.As(err, &be) {
			return forge.Event{}, fmt.Errorf("publish delta: %w: %w", forge.ErrStore, be.err)
		}
		if err != nil {
			return forge.Event{}, err
		}
		return evs[0], nil
	}
	seq, err := l.seqLocked(ctx, sq)
	if err != nil {
		return forge.Event{}, err
	}
	ev, err := l.event(sessionID, seq, d)
	if err != nil {
		return forge.Event{}, err
	}
	l.publishLocked(ctx, sq, ev)
	return ev, nil
}

// QueueDelta publishes a bus-only event (a model.message.delta) without
// making the caller wait for the bus: with a Fence (a bus shared by
// processes, such as Redis), the delta is queued and a flusher gives the
// queued deltas their seqs and publishes them together, in one bus call
// for as many as were queued meanwhile, before any later write of the
// session (Write and Update publish what is queued first, so a delta is
// published before anything above it is committed). The error is an
// earlier queued delta's failure to get a seq. Without a Fence it is
// PublishDelta (the in-process bus costs no round trip).
func (l *Log) QueueDelta(ctx context.Context, tenant, sessionID string, d Draft) error {
	if l.fence == nil {
		_, err := l.PublishDelta(ctx, tenant, sessionID, d)
		return err
	}
	sq := l.sequencer(tenant, sessionID)
	sq.outMu.Lock()
	defer sq.outMu.Unlock()
	if err := sq.outErr; err != nil {
		sq.outErr = nil
		return err
	}
	sq.out = append(sq.out, d)
	if !sq.flushing {
		sq.flushing = true
		l.flushers.Add(1)
		go l.flush(context.WithoutCancel(ctx), sq)
	}
	return nil
}

// flush is a flusher: it publishes what is queued until nothing is, and
// what the bus did not take until it does (or the Log closes).
func (l *Log) flush(ctx context.Context, sq *sequencer) {
	defer l.flushers.Done()
	wait := retryUnsentMin
	for {
		sq.mu.Lock()
		sq.outMu.Lock()
		if len(sq.out) == 0 && len(sq.unsent) == 0 {
			sq.flushing = false
			sq.outMu.Unlock()
			sq.mu.Unlock()
			return
		}
		sq.outMu.Unlock()
		retry := l.drainLocked(ctx, sq) != nil
		sq.outMu.Lock()
		if !retry {
			wait = retryUnsentMin
		}
		stop := false
		if retry {
			select {
			case <-l.closing:
				// Shutting down: what the bus did not take stays for
				// a later write of this process (none, most likely).
				sq.flushing, stop = false, true
			default:
			}
		}
		sq.outMu.Unlock()
		sq.mu.Unlock()
		if stop {
			return
		}
		if retry {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.closing:
				t.Stop()
			}
			wait = min(2*wait, retryUnsentMax)
		}
	}
}

// The flusher's waits between attempts to publish what the bus did not
// take: short at first (a Redis restart takes about a second), then once
// a second.
const (
	retryUnsentMin = 50 * time.Millisecond
	retryUnsentMax = time.Second
)

// busError is a bus failure to take events (as opposed to a failure to
// reserve their seqs): what was queued stays queued.
type busError struct{ err error }

func (e busError) Error() string { return e.err.Error() }
func (e busError) Unwrap() error { return e.err }

// drainLocked publishes what the bus did not take and the queued deltas
// (sq.mu held), and returns the bus's error if it did not take them. A
// failure to reserve seqs is kept for the next QueueDelta (it fails the
// turn); on a bus failure the deltas stay queued or unsent, for the next
// attempt.
func (l *Log) drainLocked(ctx context.Context, sq *sequencer) error {
	sq.outMu.Lock()
	drafts := sq.out
	sq.out = nil
	sq.outMu.Unlock()
	if len(drafts) == 0 && len(sq.unsent) == 0 {
		return nil
	}
	_, err := l.publishQueuedLocked(ctx, sq, drafts)
	var be busError
	switch {
	case errors.As(err, &be):
		// No hold, so no seqs yet: the drafts go back in front of what
		// was queued since.
		sq.outMu.Lock()
		sq.out = append(drafts, sq.out...)
		sq.outMu.Unlock()
		return be.err
	case err != nil:
		sq.outMu.Lock()
		if sq.outErr == nil {
			sq.outErr = err
		}
		sq.outMu.Unlock()
		return nil
	case len(sq.unsent) > 0:
		return errBusDidNotTake
	}
	return nil
}

var errBusDidNotTake = errors.New("the bus did not take the session's deltas")

// drainAllLocked is drainLocked for a write about to commit events: it
// retries (as commits are retried) until the bus has taken every earlier
// delta, and fails the write (ErrStore) if it does not: nothing may be
// committed above a delta that subscribers have not got.
func (l *Log) drainAllLocked(ctx context.Context, sq *sequencer) error {
	err := l.retrying(ctx, func(ctx context.Context) error {
		if err := l.drainLocked(ctx, sq); err != nil {
			return err
		}
		sq.outMu.Lock()
		defer sq.outMu.Unlock()
		if len(sq.out) > 0 {
			return errBusDidNotTake
		}
		return nil
	})
	if err != nil {
		return forge.WithRetryAfter(fmt.Errorf("publish earlier deltas of session %s: %w: %w", sq.session, forge.ErrStore, err), BusRetryAfter)
	}
	return nil
}

// publishQueuedLocked gives drafts their seqs and publishes them, after
// what the bus did not take before, in one bus call: without a hold when
// nobody holds the session and this process wrote it last, else under a
// hold (with fresh seqs when another process wrote the session since: the
// first ones might lie below its events). A failure to take the hold is a
// busError (the drafts have no seqs yet); a failure to publish keeps the
// events unsent.
func (l *Log) publishQueuedLocked(ctx context.Context, sq *sequencer, drafts []Draft) ([]forge.Event, error) {
	assign := func() ([]forge.Event, error) {
		evs := make([]forge.Event, 0, len(drafts))
		for _, d := range drafts {
			seq, err := l.seqLocked(ctx, sq)
			if err != nil {
				return nil, err
			}
			ev, err := l.event(sq.session, seq, d)
			if err != nil {
				return nil, err
			}
			evs = append(evs, ev)
		}
		return evs, nil
	}
	if sq.next != 0 && sq.next+int64(len(drafts))-1 <= sq.reserved {
		evs, err := assign()
		if err != nil {
			return nil, err
		}
		ok, err := l.sendLocked(ctx, sq, "", evs)
		if ok || err != nil {
			return evs, nil // a bus failure: evs are unsent now
		}
		// Another process holds the session or wrote it since.
	}
	hold, err := l.acquireLocked(ctx, sq)
	if err != nil {
		return nil, busError{err}
	}
	evs, err := assign()
	if err != nil {
		l.release(ctx, sq.session, hold, nil)
		return nil, err
	}
	_, _ = l.sendLocked(ctx, sq, hold, evs)
	return evs, nil
}

// sendLocked publishes sq.unsent and then evs, under hold (ending it) when
// hold is set, else without a hold (PublishUnheld: false, nil means take
// a hold). When the bus does not take them, they are all unsent (logged),
// for the next attempt. When it refuses them (ErrConflict: another
// process published above the unsent ones, or the hold expired;
// ErrTurnEnded), the unsent ones are dropped, logged, and evs are tried
// alone.
func (l *Log) sendLocked(ctx context.Context, sq *sequencer, hold string, evs []forge.Event) (bool, error) {
	ctx = context.WithoutCancel(ctx)
	all := evs
	if len(sq.unsent) > 0 {
		all = append(slices.Clone(sq.unsent), evs...)
	}
	if len(all) == 0 {
		if hold != "" {
			l.release(ctx, sq.session, hold, nil)
		}
		return true, nil
	}
	// The rows are folded from what the bus took before: the unsent
	// events count once it takes them.
	send, next := sq.folds.foldBatch(all, l.quarter)
	var ok bool
	var err error
	if hold != "" {
		err = l.fence.Release(ctx, sq.session, hold, send)
		ok = err == nil
	} else {
		ok, err = l.fence.PublishUnheld(ctx, send...)
	}
	switch {
	case err == nil:
		if ok {
			sq.unsent = nil
			sq.folds = next
		}
		return ok, nil
	case final(err) && len(sq.unsent) > 0:
		l.log.Warn("bus: events it did not take earlier are refused now; dropped", "session_id", sq.session,
			"seq", sq.unsent[0].Seq, "events", len(sq.unsent), "err", err)
		sq.unsent = nil
		if hold != "" {
			// The refusal ended the hold (or it had expired).
			h, _, aerr := l.fence.Acquire(ctx, sq.session)
			if aerr != nil {
				sq.unsent = slices.Clone(evs)
				l.log.Warn("bus: publish failed; kept for the next attempt", "session_id", sq.session, "events", len(evs), "err", aerr)
				return false, aerr
			}
			hold = h
		}
		return l.sendLocked(ctx, sq, hold, evs)
	case final(err):
		l.log.Warn("bus: publish refused", "session_id", sq.session, "seq", all[0].Seq, "events", len(all), "err", err)
		return false, err
	}
	sq.unsent = slices.Clone(all)
	l.log.Warn("bus: publish failed; kept for the next attempt", "session_id", sq.session, "seq", all[0].Seq, "events", len(all), "err", err)
	return false, err
}
