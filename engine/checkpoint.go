package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// checkpointer keeps the text and reasoning parts of every thread of a
// turn that are receiving deltas, and rewrites their rows with the text so
// far about once per CheckpointInterval (DESIGN.md: a crash loses at most
// about the last second of streamed text). Child threads' parts are
// checkpointed like the main thread's.
type checkpointer struct {
	mu    sync.Mutex // guards parts and every streamingPart's fields
	parts map[string]*streamingPart
}

// streamingPart is a part receiving deltas. part belongs to the thread's
// executor, which changes it only through the checkpointer.
type streamingPart struct {
	part   *forge.Part
	thread string
	buf    []byte
	saved  int // len(buf) when last checkpointed
	// rowStored: the part's row is committed, so it may be checkpointed.
	rowStored bool
}

// start registers p, of thread, as receiving deltas.
func (c *checkpointer) start(p *forge.Part, thread string) *streamingPart {
	sp := &streamingPart{part: p, thread: thread}
	c.mu.Lock()
	c.parts[p.ID] = sp
	c.mu.Unlock()
	return sp
}

// stored marks the parts' rows committed and reports whether one of them
// is still streaming.
func (c *checkpointer) stored(parts []*streamingPart) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	streaming := false
	for _, sp := range parts {
		sp.rowStored = true
		if c.parts[sp.part.ID] == sp {
			streaming = true
		}
	}
	return streaming
}

func (c *checkpointer) append(sp *streamingPart, text string) {
	c.mu.Lock()
	sp.buf = append(sp.buf, text...)
	c.mu.Unlock()
}

// end moves the streamed text onto the part, sets its state and stops
// checkpointing it.
func (c *checkpointer) end(sp *streamingPart, state string) {
	c.mu.Lock()
	sp.part.Text = string(sp.buf)
	sp.part.State = state
	delete(c.parts, sp.part.ID)
	c.mu.Unlock()
}

// takeOpen stops checkpointing every part still streaming and returns
// their rows, interrupted with the text so far (the terminal write closes
// them; a child thread still running keeps its own copy).
func (c *checkpointer) takeOpen() map[string][]*forge.Part {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]*forge.Part{}
	for id, sp := range c.parts {
		row := sp.part.Clone()
		row.Text, row.State = string(sp.buf), forge.StateInterrupted
		out[sp.thread] = append(out[sp.thread], row)
		delete(c.parts, id)
	}
	return out
}

// dirty returns the rows of the parts whose text changed since their last
// checkpoint, and a func marking them saved once committed.
func (c *checkpointer) dirty(now time.Time) ([]*forge.Part, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var rows []*forge.Part
	var saved []*streamingPart
	var lens []int
	for _, sp := range c.parts {
		if len(sp.buf) == sp.saved || !sp.rowStored {
			continue
		}
		row := sp.part.Clone()
		row.Text, row.UpdatedAt = string(sp.buf), now
		rows = append(rows, row)
		saved, lens = append(saved, sp), append(lens, len(sp.buf))
	}
	return rows, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, sp := range saved {
			sp.saved = lens[i]
		}
	}
}

// checkpointLoop is the goroutine checkpointing a turn's streaming parts
// about once per CheckpointInterval. It starts when the first streaming
// part's row is stored (a turn whose reply fits in one write never starts
// it) and is stopped by the turn's executor before the terminal write.
type checkpointLoop struct {
	stop chan struct{}
	done chan struct{}
}

// startCheckpoints starts the checkpoint loop unless it runs or the turn's
// loop has ended.
func (x *execution) startCheckpoints() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.checkpoints != nil || x.checkpointsOff {
		return
	}
	l := &checkpointLoop{stop: make(chan struct{}), done: make(chan struct{})}
	x.checkpoints = l
	x.coveredAt.Store(time.Now().UnixNano())
	go func() {
		defer close(l.done)
		t := time.NewTicker(x.e.cfg.CheckpointInterval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				// A checkpoint that landed late (its retries outlasted an
				// outage) covers only what had streamed when it was taken:
				// take the next one now, not a tick later, so the deltas
				// withheld meanwhile go out.
				if x.checkpoint() && x.uncovered(time.Now()) {
					x.checkpoint()
				}
			}
		}
	}()
}

// stopCheckpoints stops the checkpoint loop, if it runs, and waits for it;
// none starts after.
func (x *execution) stopCheckpoints() {
	x.mu.Lock()
	x.checkpointsOff = true
	l := x.checkpoints
	x.mu.Unlock()
	if l != nil {
		close(l.stop)
		<-l.done
	}
}

// checkpoint rewrites the dirty streaming parts' rows in one transaction,
// fenced on the turn, with no event. It is ordered with the turn's other
// row writes by x.rows (a part's completed row, written after it stopped
// streaming, is never overwritten by an older checkpoint), not by the
// session's sequencer: deltas published meanwhile do not wait for it.
func (x *execution) checkpoint() (landed bool) {
	x.rows.Lock()
	takenAt := time.Now()
	rows, saved := x.streams.dirty(x.e.clock.Now())
	var err error
	if len(rows) > 0 {
		err = x.e.events.Retrying(x.ctx, func(ctx context.Context) error {
			return x.e.store.Commit(ctx, &forge.Batch{Tenant: x.tenant, SessionID: x.session.ID, TurnID: x.turn.ID, Parts: rows, Owner: x.e.owner()})
		})
		if err == nil {
			saved()
		}
	}
	x.rows.Unlock()
	switch {
	case errors.Is(err, forge.ErrTurnEnded):
		x.loseTurn(err.Error())
	case err != nil:
		x.e.log.Warn("checkpoint failed", "session_id", x.session.ID, "turn_id", x.turn.ID, "err", err)
	default:
		x.coveredAt.Store(takenAt.UnixNano())
		return true
	}
	return false
}

// uncovered reports whether the stored text lags the stream by more than
// a checkpoint interval and a quarter: the last checkpoint that landed
// was taken longer ago (the store is failing or slow). Deltas are then
// withheld (thread.delta), so that what a client is shown of a turn is at
// most about one interval ahead of what a store outage lets it keep
// (DESIGN.md: at most about a second; issue 22 measured 1.8-4.3 s shown
// and lost before).
func (x *execution) uncovered(now time.Time) bool {
	at := x.coveredAt.Load()
	if at == 0 {
		return false
	}
	iv := x.e.cfg.CheckpointInterval
	return now.Sub(time.Unix(0, at)) > iv+iv/4
}
