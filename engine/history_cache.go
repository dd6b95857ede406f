package engine

import (
	"slices"
	"sync"

	"github.com/forge-runtime/forge"
)

// historyCacheSize bounds how many sessions keep their last history in
// memory.
const historyCacheSize = 1024

// historyCache keeps, per session, the turn that last ended here, the main
// thread's history and the snapshot as they stood then, and the model
// messages converted from that history, so the next turn chaining from
// that turn reloads and reconverts none of them, and waiting for the turn
// needs no read. A turn's rows never change after its terminal write, so
// an entry is valid for as long as its turn is the one chained from.
type historyCache struct {
	mu      sync.Mutex // guards the following
	entries map[string]cachedHistory
}

type cachedHistory struct {
	turn *forge.Turn // as it ended
	msgs []*forge.Message
	snap *forge.Snapshot
	memo modelMemo
}

// get returns the turn's history (the caller may append to it), its
// snapshot (the caller must not change it) and its model messages.
func (c *historyCache) get(sessionID, turnID string) ([]*forge.Message, *forge.Snapshot, modelMemo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.entries[sessionID]
	if !ok || h.turn.ID != turnID {
		return nil, nil, modelMemo{}, false
	}
	return slices.Clip(h.msgs), h.snap, h.memo, true
}

// ended returns a copy of the turn as it ended here, if it is the
// session's last one to, nil otherwise.
func (c *historyCache) ended(tenant, sessionID, turnID string) *forge.Turn {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.entries[sessionID]
	if !ok || h.turn.ID != turnID || h.turn.Tenant != tenant {
		return nil
	}
	t := *h.turn
	return &t
}

// put records turn (a copy is kept) as the session's last ended turn.
func (c *historyCache) put(sessionID string, turn *forge.Turn, msgs []*forge.Message, snap *forge.Snapshot, memo modelMemo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]cachedHistory{}
	}
	if _, ok := c.entries[sessionID]; !ok && len(c.entries) >= historyCacheSize {
		for k := range c.entries { // evict an arbitrary entry
			delete(c.entries, k)
			break
		}
	}
	t := *turn
	c.entries[sessionID] = cachedHistory{turn: &t, msgs: slices.Clip(msgs), snap: snap, memo: memo}
}

func (c *historyCache) drop(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, sessionID)
}
