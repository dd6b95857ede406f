package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/modelview"
)

// ModelView returns the main thread's messages as the model would see them
// next, oldest first (modelview.FilterCompacted; without compaction, the
// branch), a page at a time: the cursor is the last message id of a page.
// A page is read from the store (each costs what it returns): with a
// compaction boundary the view is [request, summary, then the branch from
// the tail's start without them]; with tool-output pruning, where pruning
// starts is found once per ended tip (pruneCutoffs) and applied to each
// page.
func (e *Engine) ModelView(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Message, string, error) {
	sess, err := e.store.GetSession(ctx, tenant, sessionID)
	if err != nil {
		return nil, "", err
	}
	if kind := e.kind(sess); kind.readsWhole() {
		// Messages arrive outside turns (a monologue's copies): the view
		// is the whole branch in the kind's order (never compacted in
		// place).
		tip := ""
		if sess.TipTurnID != nil {
			tip = *sess.TipTurnID
		}
		msgs, next, err := e.store.ListMessages(ctx, tenant, forge.MessageQuery{SessionID: sessionID, TipTurnID: tip, ThreadID: sess.MainThreadID, ListOptions: opts})
		return kind.Order(msgs), next, err
	}
	if sess.TipTurnID == nil {
		return []*forge.Message{}, "", nil
	}
	q := forge.MessageQuery{SessionID: sessionID, TipTurnID: *sess.TipTurnID, ThreadID: sess.MainThreadID, ListOptions: opts}
	b, err := e.store.LatestCompaction(ctx, tenant, q)
	if err != nil {
		return nil, "", err
	}
	prune := e.pruneBudget(ctx, tenant, sess)
	if b == nil && prune == nil {
		return e.store.ListMessages(ctx, tenant, q)
	}
	q.ListOptions = forge.ListOptions{}
	v := &viewPages{e: e, tenant: tenant, q: q, b: b}
	if b != nil {
		ok, err := v.readHead(ctx)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			// The request and summary are not next to each other: the
			// view is read whole.
			view, err := e.viewFrom(ctx, tenant, q, b)
			if err != nil {
				return nil, "", err
			}
			if prune != nil {
				view = modelview.PruneToolOutputs(view, *prune)
			}
			return modelview.Page(view, opts.Cursor, opts.Limit)
		}
	}
	page, next, err := v.page(ctx, opts.Cursor, opts.Limit)
	if err != nil || prune == nil {
		return page, next, err
	}
	cut, err := e.pruneCutoff(ctx, v, *prune)
	if err != nil {
		return nil, "", err
	}
	return cut.apply(page, v.head), next, nil
}

// pruneBudget is the tool-output budget of the agent the session's next
// turn runs with, nil when pruning is off.
func (e *Engine) pruneBudget(ctx context.Context, tenant string, sess *forge.Session) *int64 {
	a, err := e.agentFor(ctx, tenant, sess)
	if err != nil {
		return nil
	}
	return a.Compaction.PruneToolOutputs
}

// viewPages reads a model view page by page: head (the compaction request
// and summary, when there is a boundary), then the rest, the branch's
// messages on the thread from the boundary's From without the head's, in
// id order.
type viewPages struct {
	e      *Engine
	tenant string
	q      forge.MessageQuery // the branch and thread; From is the rest's start
	b      *forge.CompactionBoundary
	head   []*forge.Message
}

// readHead reads the boundary's request and summary; false when they are
// not the first two of the rest's messages from the request on.
func (v *viewPages) readHead(ctx context.Context) (bool, error) {
	q := v.q
	q.From, q.Limit = v.b.RequestID, 2
	ms, _, err := v.e.store.ListMessages(ctx, v.tenant, q)
	if err != nil {
		return false, fmt.Errorf("load history: %w", err)
	}
	if len(ms) < 2 || ms[0].ID != v.b.RequestID || ms[1].ID != v.b.SummaryID {
		return false, nil
	}
	v.head = ms
	v.q.From = v.b.TailStartID
	if v.b.RequestID < v.q.From {
		v.q.From = v.b.RequestID
	}
	return true, nil
}

func (v *viewPages) isHead(m *forge.Message) bool {
	return len(v.head) == 2 && (m.ID == v.head[0].ID || m.ID == v.head[1].ID)
}

// page is the page after cursor (modelview.Page over the whole view).
func (v *viewPages) page(ctx context.Context, cursor string, limit int) ([]*forge.Message, string, error) {
	if limit <= 0 {
		limit = 100
	}
	start := 0 // into head
	after := ""
	switch {
	case cursor == "":
	case len(v.head) == 2 && cursor == v.head[0].ID:
		start = 1
	case len(v.head) == 2 && cursor == v.head[1].ID:
		start = 2
	default:
		start, after = len(v.head), cursor
	}
	out := append([]*forge.Message{}, v.head[start:min(len(v.head), start+limit)]...)
	// One more than the page holds tells whether a next page exists.
	rest, err := v.rest(ctx, after, limit-len(out)+1)
	if err != nil {
		return nil, "", err
	}
	out = append(out, rest...)
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = out[limit-1].ID
	}
	return out, next, nil
}

// rest returns up to n messages of the rest after cursor ("" from its
// start). A cursor that is not a message of the rest is ErrInvalid.
func (v *viewPages) rest(ctx context.Context, cursor string, n int) ([]*forge.Message, error) {
	q := v.q
	skip := ""
	if cursor != "" {
		invalid := forge.Errorf(forge.ErrInvalid, "cursor %q is not in the current model view", cursor)
		if cursor < q.From {
			return nil, invalid
		}
		// Read from the cursor itself: the first message tells whether it
		// is in the view.
		q.From, skip = cursor, cursor
	}
	var out []*forge.Message
	for first := true; len(out) < n; first = false {
		q.Limit = n - len(out) + len(v.head) + 1
		ms, next, err := v.e.store.ListMessages(ctx, v.tenant, q)
		switch {
		case errors.Is(err, forge.ErrNotFound) && skip != "" && first:
			return nil, forge.Errorf(forge.ErrInvalid, "cursor %q is not in the current model view", cursor)
		case err != nil:
			return nil, fmt.Errorf("load history: %w", err)
		}
		if first && skip != "" {
			if len(ms) == 0 || ms[0].ID != skip || v.isHead(ms[0]) {
				return nil, forge.Errorf(forge.ErrInvalid, "cursor %q is not in the current model view", cursor)
			}
			ms = ms[1:]
		}
		for _, m := range ms {
			if !v.isHead(m) && len(out) < n {
				out = append(out, m)
			}
		}
		if next == "" {
			break
		}
		q.Cursor = next
	}
	return out, nil
}

// pruneCut is where tool-output pruning starts in a view
// (modelview.PruneCutoff): the message (a head position, or -1 and the id
// of a message of the rest) and its part; none when nothing is pruned.
type pruneCut struct {
	none bool
	head int
	id   string
	part int
}

// apply prunes a page of the view (head: the view's head).
func (c pruneCut) apply(page, head []*forge.Message) []*forge.Message {
	if c.none {
		return page
	}
	out := make([]*forge.Message, len(page))
	for i, m := range page {
		h := -1
		for k, hm := range head {
			if hm.ID == m.ID {
				h = k
			}
		}
		// The head comes first in the view, then the rest in id order.
		var older, at bool
		switch {
		case c.head >= 0 && h >= 0:
			older, at = h < c.head, h == c.head
		case c.head >= 0:
		case h >= 0:
			older = true
		default:
			older, at = m.ID < c.id, m.ID == c.id
		}
		switch {
		case at:
			out[i] = modelview.PruneFrom(m, c.part)
		case older:
			out[i] = modelview.PruneFrom(m, len(m.Parts))
		default:
			out[i] = m
		}
	}
	return out
}

// pruneCutoff finds where pruning starts in v's view: read whole once per
// tip, then kept while the tip has ended (its branch no longer changes).
func (e *Engine) pruneCutoff(ctx context.Context, v *viewPages, budget int64) (pruneCut, error) {
	key := pruneKey{tenant: v.tenant, session: v.q.SessionID, tip: v.q.TipTurnID, budget: budget}
	if c, ok := e.cutoffs.get(key); ok {
		return c, nil
	}
	view, err := e.viewFrom(ctx, v.tenant, v.q, v.b)
	if err != nil {
		return pruneCut{}, err
	}
	c := pruneCut{none: true}
	if at, part := modelview.PruneCutoff(view, budget); at >= 0 {
		c = pruneCut{head: -1, id: view[at].ID, part: part}
		if at < len(v.head) {
			c.head = at
		}
	}
	if t, err := e.store.GetTurn(ctx, v.tenant, v.q.SessionID, v.q.TipTurnID); err == nil && t.Ended() {
		e.cutoffs.put(key, c)
	}
	return c, nil
}

type pruneKey struct {
	tenant, session, tip string
	budget               int64
}

// cutoffCacheSize bounds the prune cutoffs kept (a few words each).
const cutoffCacheSize = 4096

// cutoffCache keeps the prune cutoffs of ended tips.
type cutoffCache struct {
	mu sync.Mutex // guards the following
	m  map[pruneKey]pruneCut
}

func (c *cutoffCache) get(k pruneKey) (pruneCut, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *cutoffCache) put(k pruneKey, v pruneCut) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[pruneKey]pruneCut{}
	}
	if len(c.m) >= cutoffCacheSize {
		for old := range c.m { // evict an arbitrary entry
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}
