package redis

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Unheld publishes (a session's queued deltas) go to a server in groups.
// At a real model's pace a session has about one delta to publish at a
// time, so each used to cost a script call of its own, and most of a
// call's cost in Redis is the call, not the commands in it (issue 22:
// ~15 of ~21 µs; docs/benchmarks.md). The publishes queued while one
// group is on the wire go together in the next: one publishGroupScript
// call, each session published or refused on its own. Redis then spends
// ~12 µs a delta in groups of 8 and ~9 µs in groups of 32, against ~35 µs
// alone (BenchmarkPublishGroup). A group of one rarely finds company by
// itself at a model's pace (a call takes ~0.1 ms; 100 streams send a
// delta every 0.2 ms), so when the last group had company its leader
// waits Options.GroupWait for more before sending. A lone stream (the
// last group was a group of one) is sent at once, never waiting.
//
// The group is led by one of its callers (as the PostgreSQL store's
// checkpoint groups are), so no goroutine outlives the calls.

// maxPublishGroup caps the sessions in one script call.
const maxPublishGroup = 64

type publishGroups struct {
	mu      sync.Mutex // guards the following
	queue   []*publishReq
	leading bool
	last    int // the size of the last group sent
	// onGroup, set by tests, is called by the leader with the group's
	// size before sending it.
	onGroup func(n int)
}

type publishReq struct {
	session string
	events  []any // eventArgs of the session's events

	res  []string      // publishLua's answer, or
	err  error         // the call's failure
	done chan struct{} // closed once res or err is set
	lead chan struct{} // closed when this request is to lead the next group
}

// publish sends r in a group and waits for its outcome. The call runs
// under no caller's context: once a group is on the wire, none of its
// callers can take its publish back (the client's timeouts bound it).
func (g *publishGroups) publish(b *Bus, n *node, r *publishReq) {
	g.mu.Lock()
	g.queue = append(g.queue, r)
	if g.leading {
		g.mu.Unlock()
		select {
		case <-r.done:
			return
		case <-r.lead:
		}
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	// Leading: send what is queued (this request among it), then hand
	// the lead to the first request queued since, if any.
	g.mu.Lock()
	if wait := b.opts.GroupWait; wait > 0 && g.last > 1 && len(g.queue) < maxPublishGroup {
		g.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-b.closed:
			t.Stop()
		}
		g.mu.Lock()
	}
	k := min(len(g.queue), maxPublishGroup)
	g.last = k
	group := g.queue[:k:k]
	g.queue = g.queue[k:]
	onGroup := g.onGroup
	g.mu.Unlock()
	if onGroup != nil {
		onGroup(k)
	}
	b.sendGroup(n, group)
	g.mu.Lock()
	if len(g.queue) > 0 {
		close(g.queue[0].lead)
	} else {
		g.leading = false
	}
	g.mu.Unlock()
	<-r.done
}

// sendGroup publishes the group's sessions on node n in one script call
// (publishScript for a group of one) and sets each request's outcome.
func (b *Bus) sendGroup(n *node, group []*publishReq) {
	defer func() {
		for _, r := range group {
			close(r.done)
		}
	}()
	ctx := context.Background()
	head := []any{"unheld", b.opts.WriterID, b.opts.MaxLen, ms(b.opts.Retention), ms(b.opts.RunningTTL)}
	if len(group) == 1 {
		r := group[0]
		k := b.keys(r.session)
		args := append(append(head, k.channel), r.events...)
		r.res, r.err = publishScript.Run(ctx, n.rdb, []string{k.stream, k.open, k.meta, k.hold}, args...).StringSlice()
		return
	}
	keys := make([]string, 0, 4*len(group))
	size := len(head)
	for _, r := range group {
		size += 2 + len(r.events)
	}
	args := make([]any, 0, size)
	args = append(args, head...)
	for _, r := range group {
		k := b.keys(r.session)
		keys = append(keys, k.stream, k.open, k.meta, k.hold)
		args = append(args, k.channel, len(r.events)/8)
		args = append(args, r.events...)
	}
	out, err := publishGroupScript.Run(ctx, n.rdb, keys, args...).Slice()
	if err == nil && len(out) != len(group) {
		err = fmt.Errorf("%d answers for %d sessions", len(out), len(group))
	}
	for i, r := range group {
		if err != nil {
			r.err = err
			continue
		}
		r.res, r.err = answerStrings(out[i])
	}
}

// answerStrings is one session's answer in publishGroupScript's reply.
func answerStrings(v any) ([]string, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected answer %v", v)
	}
	res := make([]string, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, fmt.Errorf("unexpected answer %v", v)
		}
		res[i] = s
	}
	return res, nil
}
