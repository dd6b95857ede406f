package engine

import (
	"slices"
	"sync"

	"github.com/forge-runtime/forge"
)

// historyCacheSize bounds how many sessions keep their last history in
// memory.
const historyCacheSize = 1024

// historyCache keeps, per session, the main thread's history and the
// snapshot as they stood when its last turn ended here, so the next turn
// chaining from that turn reloads neither. A turn's rows never change after
// its terminal write, so an entry is valid for as long as its turn is the
// one chained from.
type historyCache struct {
	mu      sync.Mutex // guards the following
	entries map[string]cachedHistory
}

type cachedHistory struct {
	turnID string
	msgs   []*forge.Message
	snap   *forge.Snapshot
}

// get returns the turn's history (the caller may append to it) and its
// snapshot (the caller must not change it).
func (c *historyCache) get(sessionID, turnID string) ([]*forge.Message, *forge.Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.entries[sessionID]
	if !ok || h.turnID != turnID {
		return nil, nil, false
	}
	return slices.Clip(h.msgs), h.snap, true
}

func (c *historyCache) put(sessionID, turnID string, msgs []*forge.Message, snap *forge.Snapshot) {
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
	c.entries[sessionID] = cachedHistory{turnID: turnID, msgs: slices.Clip(msgs), snap: snap}
}

func (c *historyCache) drop(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, sessionID)
}
