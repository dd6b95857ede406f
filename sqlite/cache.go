package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/forge-runtime/forge"
)

// The row cache.
//
// Every turn looks up its session (twice), the agent by name, the turn it
// chains from and, in wait mode, itself once ended: five point reads, each
// a read transaction whose first page reads go to the file, because a
// reader connection drops its page cache whenever the log has moved. The
// cache keeps those rows in memory, as the driver returned them, and they
// are scanned exactly as a read from the database would be:
//
//   - live sessions and live agents (by name, decoded: a turn's lookup
//     then costs a copy, not a JSON decoding), filled by the reads that
//     miss;
//   - ended turns, whose rows never change again, put by the terminal
//     write itself (RETURNING) and by reads that find one; a cached turn
//     is served only while its session is cached, that is live.
//
// It is written through. A write that changes a cached kind of row puts
// the row as stored (RETURNING), applies its change to the cached row (a
// session's tip and usage: what the UPDATE did, on a copy) or drops it,
// once its transaction has committed and before the write returns (see
// tx.after), so that a caller never reads from the cache a row older than
// one its own writes made.
// A read that misses fills the cache only if nothing was put or dropped
// since the read began (epoch): otherwise it could put back a row older
// than the write it raced. The Store owns its database file (the flock in
// Open), so no other process changes a row under the cache.

// Entry bounds: an arbitrary entry goes when a kind is full.
const (
	maxCachedSessions = 4096
	maxCachedTurns    = 4096
	maxCachedAgents   = 1024
)

type cacheKey struct{ tenant, id string }

type cachedTurn struct {
	session string
	vals    []any
}

type rowCache struct {
	mu       sync.Mutex // guards the following
	epoch    uint64     // counts puts and drops
	sessions map[cacheKey][]any
	turns    map[cacheKey]cachedTurn
	agents   map[cacheKey]*forge.Agent // by name, decoded; handed out as clones
}

func newRowCache() *rowCache {
	return &rowCache{
		sessions: map[cacheKey][]any{},
		turns:    map[cacheKey]cachedTurn{},
		agents:   map[cacheKey]*forge.Agent{},
	}
}

// begin returns the epoch a read that may fill the cache starts at.
func (c *rowCache) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

func (c *rowCache) session(tenant, id string) ([]any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.sessions[cacheKey{tenant, id}]
	return v, ok
}

// turn returns an ended turn of a live session.
func (c *rowCache) turn(tenant, session, id string) ([]any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.turns[cacheKey{tenant, id}]
	if !ok || t.session != session {
		return nil, false
	}
	if _, live := c.sessions[cacheKey{tenant, session}]; !live {
		return nil, false
	}
	return t.vals, true
}

// turnByID returns an ended turn of a live session, whichever session.
func (c *rowCache) turnByID(tenant, id string) ([]any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.turns[cacheKey{tenant, id}]
	if !ok {
		return nil, false
	}
	if _, live := c.sessions[cacheKey{tenant, t.session}]; !live {
		return nil, false
	}
	return t.vals, true
}

// agent returns a copy of the live agent named name.
func (c *rowCache) agent(tenant, name string) (*forge.Agent, bool) {
	c.mu.Lock()
	a, ok := c.agents[cacheKey{tenant, name}]
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	return a.Clone(), true
}

// fillSession caches a live session read at epoch.
func (c *rowCache) fillSession(epoch uint64, tenant, id string, vals []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == epoch {
		putBounded(c.sessions, cacheKey{tenant, id}, vals, maxCachedSessions)
	}
}

// fillTurn caches an ended turn read at epoch.
func (c *rowCache) fillTurn(epoch uint64, tenant, session, id string, vals []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == epoch {
		putBounded(c.turns, cacheKey{tenant, id}, cachedTurn{session, vals}, maxCachedTurns)
	}
}

// fillAgent caches a copy of the live agent named name, read at epoch.
func (c *rowCache) fillAgent(epoch uint64, tenant, name string, a *forge.Agent) {
	a = a.Clone() // the caller may change its own
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == epoch {
		putBounded(c.agents, cacheKey{tenant, name}, a, maxCachedAgents)
	}
}

// putSession stores a session row a committed write returned.
func (c *rowCache) putSession(tenant, id string, vals []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	putBounded(c.sessions, cacheKey{tenant, id}, vals, maxCachedSessions)
}

// updateSession applies a committed write's change to the cached row of a
// session, if cached: f gets a copy of the row (readers may hold the
// cached one) and returns false when it cannot apply the change, which
// drops the row. Changes are applied in commit order (tx.after), each to
// the row every earlier commit left, so the result is the row as stored.
func (c *rowCache) updateSession(tenant, id string, f func(vals []any) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	k := cacheKey{tenant, id}
	old, ok := c.sessions[k]
	if !ok {
		return
	}
	vals := slices.Clone(old)
	if !f(vals) {
		delete(c.sessions, k)
		return
	}
	c.sessions[k] = vals
}

// putTurn stores an ended turn's row a committed write returned.
func (c *rowCache) putTurn(tenant, session, id string, vals []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	putBounded(c.turns, cacheKey{tenant, id}, cachedTurn{session, vals}, maxCachedTurns)
}

// dropSession forgets a session and its turns.
func (c *rowCache) dropSession(tenant, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.sessions, cacheKey{tenant, id})
	for k, t := range c.turns {
		if k.tenant == tenant && t.session == id {
			delete(c.turns, k)
		}
	}
}

// dropAgent forgets the agent named name.
func (c *rowCache) dropAgent(tenant, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	delete(c.agents, cacheKey{tenant, name})
}

func putBounded[V any](m map[cacheKey]V, k cacheKey, v V, limit int) {
	if _, ok := m[k]; !ok && len(m) >= limit {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[k] = v
}

// valuesRow scans cached values as a row read from the database.
type valuesRow []any

func (v valuesRow) Scan(dest ...any) error {
	if len(dest) != len(v) {
		return fmt.Errorf("sqlite: scan: %d columns into %d destinations", len(v), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, v[i]); err != nil {
			return fmt.Errorf("sqlite: scan column %d: %w", i, err)
		}
	}
	return nil
}

// queryValues runs a single-row read on the read pool and returns the
// row's values as the driver gave them (what the cache keeps).
func (s *Store) queryValues(ctx context.Context, cols int, query string, args ...any) ([]any, error) {
	vals := make([]any, cols)
	ptrs := make([]any, cols)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := s.queryRow(ctx, query, args...).Scan(ptrs...); err != nil {
		return nil, err
	}
	return vals, nil
}

// returning reads the one row a writer's statement returned (RETURNING),
// or sql.ErrNoRows.
func returning(r row) ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.d == nil {
		return nil, errors.New("sqlite: returning: not a writer's row")
	}
	defer r.d.Close()
	dv := make([]driver.Value, len(r.d.Columns()))
	if err := r.d.Next(dv); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, sql.ErrNoRows
		}
		return nil, err
	}
	vals := make([]any, len(dv))
	for i, v := range dv {
		if b, ok := v.([]byte); ok {
			v = append([]byte(nil), b...) // the driver may reuse it
		}
		vals[i] = v
	}
	return vals, nil
}

// colCount counts the columns of a comma-separated column list.
func colCount(cols string) int { return strings.Count(cols, ",") + 1 }

// colIndex returns the index of col in a comma-separated column list; it
// panics if col is not there (a programming error, found at init).
func colIndex(cols, col string) int {
	for i, c := range strings.Split(cols, ",") {
		if strings.TrimSpace(c) == col {
			return i
		}
	}
	panic("sqlite: no column " + col + " in " + cols)
}
