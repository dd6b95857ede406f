package postgres

import (
	"context"
	"sync"

	"github.com/forge-runtime/forge"
)

// The turn-start cache (issue 22: fewer round trips per turn).
//
// A turn begins from its session's row and its agent's current version.
// Other replicas share the database, so unlike SQLite's write-through row
// cache this one is never served to readers that want the store's current
// rows (GetSession, GetAgent read the database): only to SessionForTurn
// and AgentForTurn, whose callers begin the turn with BeginTurn, which
// fences every field that may be stale in the same transaction:
//
//   - a session's tip: ExpectTip (begin_turn_check raises FG003);
//   - its deletion: begin_turn_check raises FG002 for a deleted session;
//   - its usage total and update time are not used to begin a turn; every
//     other field of a session never changes;
//   - an agent's current version (another replica updated or deleted it):
//     BeginTurn.AgentName (agent_is_current raises FG003).
//
// A BeginTurn that fails for any reason forgets the session and the agent
// it was given, so the caller's retry reads both afresh. What this
// process writes it applies (a new session, the tip a turn moved, an
// agent's new version, a deletion) before the write returns. A read that
// misses fills the cache only if nothing was put or dropped since it
// began (epoch), so it never puts back a row older than a write it raced.

// Entry bounds: an arbitrary entry goes when a kind is full.
const (
	maxCachedSessions = 4096
	maxCachedAgents   = 1024
)

type cacheKey struct{ tenant, id string }

type turnCache struct {
	mu       sync.Mutex // guards the following
	epoch    uint64     // counts puts and drops
	sessions map[cacheKey]*forge.Session
	agents   map[cacheKey]*forge.Agent // by name
}

func newTurnCache() *turnCache {
	// Epoch 0 marks a write's put: a read's fill starts at 1 or more.
	return &turnCache{epoch: 1, sessions: map[cacheKey]*forge.Session{}, agents: map[cacheKey]*forge.Agent{}}
}

func cloneSession(s *forge.Session) *forge.Session {
	c := *s
	if s.TipTurnID != nil {
		tip := *s.TipTurnID
		c.TipTurnID = &tip
	}
	if s.Guards != nil {
		g := *s.Guards
		c.Guards = &g
	}
	return &c
}

func (c *turnCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

func (c *turnCache) session(tenant, id string) *forge.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[cacheKey{tenant, id}]; s != nil {
		return cloneSession(s)
	}
	return nil
}

// putSession keeps s (a copy) unless the cache changed since epoch (a
// fill after a read); epoch 0 is a write's put, which always lands.
func (c *turnCache) putSession(s *forge.Session, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != 0 && epoch != c.epoch {
		return
	}
	c.epoch++
	k := cacheKey{s.Tenant, s.ID}
	if _, ok := c.sessions[k]; !ok && len(c.sessions) >= maxCachedSessions {
		for old := range c.sessions {
			delete(c.sessions, old)
			break
		}
	}
	c.sessions[k] = cloneSession(s)
}

// movedTip records a tip this process moved, on the cached row if any.
func (c *turnCache) movedTip(tenant, id, tip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	if s := c.sessions[cacheKey{tenant, id}]; s != nil {
		t := tip
		s.TipTurnID = &t
	}
}

func (c *turnCache) dropSession(tenant, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.sessions, cacheKey{tenant, id})
}

func (c *turnCache) agent(tenant, name string) *forge.Agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.agents[cacheKey{tenant, name}]; a != nil {
		return a.Clone()
	}
	return nil
}

func (c *turnCache) putAgent(a *forge.Agent, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != 0 && epoch != c.epoch {
		return
	}
	c.epoch++
	k := cacheKey{a.Tenant, a.Name}
	if _, ok := c.agents[k]; !ok && len(c.agents) >= maxCachedAgents {
		for old := range c.agents {
			delete(c.agents, old)
			break
		}
	}
	c.agents[k] = a.Clone()
}

func (c *turnCache) dropAgent(tenant, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.agents, cacheKey{tenant, name})
}

// SessionForTurn returns the session from the turn-start cache, or reads
// it (see forge.SessionStore: its tip may be stale; BeginTurn's ExpectTip
// fences it).
func (s *Store) SessionForTurn(ctx context.Context, tenant, id string) (*forge.Session, error) {
	if ses := s.cache.session(tenant, id); ses != nil {
		return ses, nil
	}
	return s.GetSession(ctx, tenant, id) // which keeps it
}

// AgentForTurn returns the agent's current version from the turn-start
// cache, or reads it (see forge.AgentStore: BeginTurn.AgentName fences a
// stale one).
func (s *Store) AgentForTurn(ctx context.Context, tenant, name string) (*forge.Agent, error) {
	if a := s.cache.agent(tenant, name); a != nil {
		return a, nil
	}
	epoch := s.cache.begin()
	a, err := s.GetAgent(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	s.cache.putAgent(a, epoch)
	return a, nil
}
