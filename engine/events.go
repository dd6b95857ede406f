package engine

import (
	"context"
	"encoding/json"
	"iter"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
)

// EventsQuery selects a subscription.
type EventsQuery struct {
	// After is the last seq the client has; events after it follow.
	After int64
	// TurnID, when set, keeps only that turn's events and ends after its
	// turn.done.
	TurnID string
}

// Events replays what followed q.After, from the stored log and the live
// backlog, then tails live events, with no gap and no duplicate. A turn
// stream ends after turn.done; a session stream ends with ctx.
func (e *Engine) Events(ctx context.Context, tenant, sessionID string, q EventsQuery) iter.Seq2[forge.Event, error] {
	return e.events(ctx, tenant, sessionID, q, nil)
}

// StreamTurn starts a turn like StartTurn and returns its event stream from
// turn.created to turn.done. The stream is subscribed before the turn
// begins, so it carries every delta however fast the turn runs. The caller
// must range over the stream (it owns a subscription until then).
func (e *Engine) StreamTurn(ctx context.Context, tenant, sessionID string, req TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error) {
	first := e.subscribe(tenant, sessionID, -1)
	turn, err := e.StartTurn(ctx, tenant, sessionID, req)
	if err != nil {
		first.sub.Close()
		return nil, nil, err
	}
	return turn, e.events(ctx, tenant, sessionID, EventsQuery{TurnID: turn.ID}, first), nil
}

// subscription is a bus subscription, the backlog it started from, and
// bound: every event with a seq above bound reaches the subscription, every
// one at or below it was published before (so it is stored, or a delta in
// the backlog). Replays from the store stop at bound; without it, a replay
// racing a running turn could jump past deltas still waiting in the channel.
// bound is -1 when this process had written nothing for the session when
// subscribing: then everything stored predates the subscription except
// what lies at or above the log's first reserved seq (log.base).
type subscription struct {
	backlog []forge.Event
	sub     *bus.Subscription
	bound   int64
	log     *sessionLog
	// streaming holds, when the backlog was trimmed, the parts streaming
	// at subscription time with their text so far.
	streaming []*forge.Part
	thread    string
}

func turnOf(ev forge.Event) string {
	if ev.TurnID == nil {
		return ""
	}
	return *ev.TurnID
}

// textBefore returns, for a cursor older than a trimmed backlog, a
// model.message row per part still streaming with its text as of just
// before the backlog (DESIGN.md: the current row first, then the rest).
// They take the seqs just below the backlog, which belonged to trimmed
// deltas the client never got; parts that find no free seq above after are
// left out (their completion event still carries the whole text).
func (s *subscription) textBefore(after int64) []forge.Event {
	if len(s.streaming) == 0 || len(s.backlog) == 0 {
		return nil
	}
	start := s.backlog[0].Seq
	var evs []forge.Event
	for i, p := range s.streaming {
		seq := start - int64(len(s.streaming)-i)
		if seq <= after {
			continue
		}
		suffix := 0
		for _, ev := range s.backlog {
			if ev.Type == forge.EventModelDelta && ev.ID == p.ID {
				var d forge.DeltaData
				if json.Unmarshal(ev.Data, &d) == nil {
					suffix += len(d.Delta)
				}
			}
		}
		row := p.Clone()
		row.Text = p.Text[:max(len(p.Text)-suffix, 0)]
		data, err := json.Marshal(row)
		if err != nil {
			continue
		}
		turn, thread := s.backlog[0].TurnID, &s.thread
		evs = append(evs, forge.Event{Seq: seq, ID: p.ID, Type: forge.EventModelMessage, SessionID: s.backlog[0].SessionID,
			TurnID: turn, ThreadID: thread, CreatedAt: s.backlog[0].CreatedAt, Data: data})
	}
	return evs
}

// subscribe subscribes under the session's sequencer lock, so no write is
// half done (seq assigned, not yet published) while the bound is taken.
// resumeAfter >= 0 marks a subscriber cut off at that cursor, which may be
// handed the backlog of a turn that just ended.
func (e *Engine) subscribe(tenant, sessionID string, resumeAfter int64) *subscription {
	l := e.sessionLog(tenant, sessionID)
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &subscription{bound: l.next - 1, log: l}
	if resumeAfter >= 0 {
		s.backlog, s.sub = e.bus.ResumeFrom(sessionID, resumeAfter)
	} else {
		s.backlog, s.sub = e.bus.Subscribe(sessionID)
	}
	if len(s.backlog) > 0 && s.backlog[0].Type != forge.EventTurnCreated {
		// The backlog was trimmed: keep the rows of the parts streaming now,
		// for a cursor older than the backlog (textBefore).
		if r := e.runningRun(sessionID); r != nil && r.turn.ID == turnOf(s.backlog[0]) {
			s.streaming, s.thread = r.streamingRows(), r.threadID
		}
	}
	return s
}

// limit is the seq replays from the store must stay below (0: none yet).
func (s *subscription) limit() int64 {
	if s.bound >= 0 {
		return s.bound + 1
	}
	return s.log.base.Load()
}

func (e *Engine) events(ctx context.Context, tenant, sessionID string, q EventsQuery, first *subscription) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		if first != nil {
			defer first.sub.Close()
		}
		if _, err := e.store.GetSession(ctx, tenant, sessionID); err != nil {
			yield(forge.Event{}, err)
			return
		}
		if q.TurnID != "" {
			t, err := e.store.GetTurn(ctx, tenant, sessionID, q.TurnID)
			if err != nil {
				yield(forge.Event{}, err)
				return
			}
			if t.Ended() && q.After >= t.LastSeq {
				return // nothing of the turn follows its turn.done
			}
		}
		last := q.After
		// emit yields ev unless already sent; it reports whether to go on.
		emit := func(ev forge.Event) (more, ended bool) {
			if ev.Seq <= last {
				return true, false
			}
			if q.TurnID != "" && (ev.TurnID == nil || *ev.TurnID != q.TurnID) {
				return true, false
			}
			last = ev.Seq
			if !yield(ev, nil) {
				return false, false
			}
			return true, q.TurnID != "" && ev.Type == forge.EventTurnDone
		}
		resumeAfter := int64(-1)
		for {
			cur := first
			first = nil
			if cur == nil {
				cur = e.subscribe(tenant, sessionID, resumeAfter)
			}
			backlog, sub := cur.backlog, cur.sub
			more, ended, err := e.replay(ctx, tenant, sessionID, q.TurnID, last, cur, emit)
			if err != nil {
				sub.Close()
				yield(forge.Event{}, err)
				return
			}
			if !more || ended {
				sub.Close()
				return
			}
			for _, evs := range [][]forge.Event{cur.textBefore(last), backlog} {
				for _, ev := range evs {
					if more, ended = emit(ev); !more || ended {
						sub.Close()
						return
					}
				}
			}
			lagged := false
		live:
			for {
				select {
				case <-ctx.Done():
					sub.Close()
					return
				case ev, ok := <-sub.C:
					if !ok {
						lagged = sub.Lagged()
						break live
					}
					if more, ended = emit(ev); !more || ended {
						sub.Close()
						return
					}
				}
			}
			sub.Close()
			if !lagged {
				return
			}
			// Cut off for falling behind: resubscribe from our cursor.
			resumeAfter = last
		}
	}
}

// replay emits stored events after `after`, below the subscription's
// limit and before its backlog.
func (e *Engine) replay(ctx context.Context, tenant, sessionID, turnID string, after int64, s *subscription, emit func(forge.Event) (bool, bool)) (more, ended bool, err error) {
	var backlogStart int64
	if len(s.backlog) > 0 {
		backlogStart = s.backlog[0].Seq
	}
	for {
		before := s.limit()
		if backlogStart > 0 && (before == 0 || backlogStart < before) {
			before = backlogStart
		}
		if before > 0 && after >= before-1 {
			return true, false, nil // the backlog and the live tail cover the rest
		}
		page, err := e.store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: sessionID, TurnID: turnID, After: after, Before: before, Limit: 1000})
		if err != nil {
			return false, false, err
		}
		// A write may have started while the page was read: what it wrote
		// reaches the subscription, and must come from there, in order.
		if limit := s.limit(); limit > 0 {
			for i, ev := range page {
				if ev.Seq >= limit {
					page = page[:i]
					break
				}
			}
		}
		for _, ev := range page {
			if more, ended = emit(ev); !more || ended {
				return more, ended, nil
			}
			after = ev.Seq
		}
		if len(page) < 1000 {
			return true, false, nil
		}
	}
}
