package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Checkpoints of streaming text are written in groups. A checkpoint is a
// write of a running turn's part rows and nothing else (the engine
// rewrites each streaming part about once a second), so with many turns
// streaming they are most of the store's transactions (issue 22: ~17,500
// a second in the paper model of 10,000 streams). The checkpoints queued
// while one group is being written go together in the next: one
// transaction and one commit for all of them, each under its own tenant
// and fenced on its own turn. As in the SQLite store's writer, a lone
// checkpoint is written at once, never waiting for company.
//
// The group is led by one of its callers, so no goroutine outlives the
// calls. A statement that fails (a fence: the turn ended or was taken
// over) undoes the whole transaction; its checkpoints are then written
// again one by one, so each caller learns its own outcome.

// maxCheckpointGroup caps the checkpoints in one transaction.
const maxCheckpointGroup = 64

type checkpointGroups struct {
	mu      sync.Mutex // guards the following
	queue   []*checkpointReq
	leading bool
	// onGroup, set by tests, is called by the leader with the group's
	// size before writing it.
	onGroup func(n int)
}

type checkpointReq struct {
	b    *pgx.Batch
	err  error
	done chan struct{} // closed once err is set
	lead chan struct{} // closed when this request is to lead the next group
}

// write writes b, a checkpoint's batch (its tenant set first), in a group.
func (g *checkpointGroups) write(ctx context.Context, s *Store, b *pgx.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &checkpointReq{b: b, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, r)
	if g.leading {
		g.mu.Unlock()
		select {
		case <-r.done:
			return r.err
		case <-r.lead:
		}
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	// Leading: write what is queued (this request among it), then hand
	// the lead to the first request queued since, if any.
	g.mu.Lock()
	n := min(len(g.queue), maxCheckpointGroup)
	group := g.queue[:n:n]
	g.queue = g.queue[n:]
	onGroup := g.onGroup
	g.mu.Unlock()
	if onGroup != nil {
		onGroup(n)
	}
	s.writeCheckpoints(context.WithoutCancel(ctx), group)
	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].lead)
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	<-r.done
	return r.err
}

// writeCheckpoints writes the group's batches in one transaction, or one
// by one when that fails, and reports each request's outcome.
func (s *Store) writeCheckpoints(ctx context.Context, group []*checkpointReq) {
	defer func() {
		for _, r := range group {
			close(r.done)
		}
	}()
	if len(group) == 1 {
		group[0].err = s.write(ctx, group[0].b)
		return
	}
	all := &pgx.Batch{}
	for _, r := range group {
		all.QueuedQueries = append(all.QueuedQueries, fresh(r.b).QueuedQueries...)
	}
	if s.write(ctx, all) == nil {
		return
	}
	for _, r := range group {
		r.err = s.write(ctx, r.b)
	}
}

// fresh copies b's queries: pgx keeps on each query the statement it was
// prepared as on the connection that sent it, so a batch is sent once.
func fresh(b *pgx.Batch) *pgx.Batch {
	out := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		out.QueuedQueries[i] = &pgx.QueuedQuery{SQL: q.SQL, Arguments: q.Arguments, Fn: q.Fn}
	}
	return out
}
