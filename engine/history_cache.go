package engine

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/forge-runtime/forge"
)

// historyCacheSize bounds how many sessions keep histories in memory, and
// branchesPerSession how many of a session's ended turns each keeps.
const (
	historyCacheSize   = 1024
	branchesPerSession = 4
)

// historyCache keeps, per session, the last turns that ended here: each
// with the main thread's history and the snapshot as they stood then, and
// the memo of that history's model messages, so the next turn chaining
// from one of them (the tip, or a recent turn a fork starts from) reloads
// and reconverts none of them, and waiting for the turn needs no read. A
// turn's rows never change after its terminal write, so an entry is valid
// for as long as its turn exists.
//
// Each session has its own lock: turns of different sessions never wait
// for each other here (a global lock led the profile at 100 concurrent
// sessions). The map of sessions is a sync.Map, written only when a
// session enters or leaves the cache.
type historyCache struct {
	sessions sync.Map     // session id -> *sessionHistories
	count    atomic.Int64 // entries of sessions
	uses     atomic.Int64 // a clock of uses, for eviction
}

// sessionHistories are the cached ended turns of one session.
type sessionHistories struct {
	used atomic.Int64 // historyCache.uses at the last use

	mu       sync.Mutex      // guards the following
	branches []cachedHistory // oldest first
	gone     bool            // no longer in the map
}

type cachedHistory struct {
	turn *forge.Turn // as it ended
	msgs []*forge.Message
	snap *forge.Snapshot
	memo modelMemo
	// lent is set once msgs, with the room past its end, was handed to a
	// turn, which appends to it in place: later turns from the same entry
	// get a copy to append to.
	lent bool
}

func (c *historyCache) session(sessionID string) *sessionHistories {
	v, ok := c.sessions.Load(sessionID)
	if !ok {
		return nil
	}
	h := v.(*sessionHistories)
	h.used.Store(c.uses.Add(1))
	return h
}

// find returns the branch ending at turnID (h.mu held).
func (h *sessionHistories) find(turnID string) *cachedHistory {
	for i := range h.branches {
		if h.branches[i].turn.ID == turnID {
			return &h.branches[i]
		}
	}
	return nil
}

// get returns the history of the branch ending at turnID (the caller may
// append to it), its snapshot (the caller must not change it) and its
// memo.
func (c *historyCache) get(sessionID, turnID string) ([]*forge.Message, *forge.Snapshot, modelMemo, bool) {
	h := c.session(sessionID)
	if h == nil {
		return nil, nil, modelMemo{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.find(turnID)
	if b == nil {
		return nil, nil, modelMemo{}, false
	}
	msgs := b.msgs
	if b.lent {
		msgs = slices.Clip(msgs)
	}
	b.lent = true
	return msgs, b.snap, b.memo, true
}

// ended returns a copy of the turn as it ended here, if it is one of the
// session's last to, nil otherwise.
func (c *historyCache) ended(tenant, sessionID, turnID string) *forge.Turn {
	h := c.session(sessionID)
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.find(turnID)
	if b == nil || b.turn.Tenant != tenant {
		return nil
	}
	t := *b.turn
	return &t
}

// put records turn (a copy is kept) as an ended turn of the session, the
// newest of its branches.
func (c *historyCache) put(sessionID string, turn *forge.Turn, msgs []*forge.Message, snap *forge.Snapshot, memo modelMemo) {
	t := *turn
	entry := cachedHistory{turn: &t, msgs: msgs, snap: snap, memo: memo}
	for {
		h := c.session(sessionID)
		if h == nil {
			fresh := &sessionHistories{}
			fresh.used.Store(c.uses.Add(1))
			v, loaded := c.sessions.LoadOrStore(sessionID, fresh)
			h = v.(*sessionHistories)
			if !loaded && c.count.Add(1) > historyCacheSize {
				c.evict(sessionID)
			}
		}
		h.mu.Lock()
		if h.gone {
			h.mu.Unlock()
			continue // dropped meanwhile: enter the session again
		}
		h.branches = slices.DeleteFunc(h.branches, func(b cachedHistory) bool { return b.turn.ID == t.ID })
		if len(h.branches) >= branchesPerSession {
			h.branches = slices.Delete(h.branches, 0, len(h.branches)-branchesPerSession+1)
		}
		h.branches = append(h.branches, entry)
		h.mu.Unlock()
		return
	}
}

// evict removes the least recently used session but keep.
func (c *historyCache) evict(keep string) {
	var (
		oldest string
		at     int64
	)
	c.sessions.Range(func(k, v any) bool {
		if u := v.(*sessionHistories).used.Load(); k != keep && (oldest == "" || u < at) {
			oldest, at = k.(string), u
		}
		return true
	})
	if oldest != "" {
		c.drop(oldest)
	}
}

// drop forgets the session's histories.
func (c *historyCache) drop(sessionID string) {
	v, ok := c.sessions.LoadAndDelete(sessionID)
	if !ok {
		return
	}
	c.count.Add(-1)
	h := v.(*sessionHistories)
	h.mu.Lock()
	h.gone = true
	h.branches = nil
	h.mu.Unlock()
}
