package httpapi

import (
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// Defaults of Config.MaxStreamsPerSession and Config.MaxStreamsPerTenant.
const (
	DefaultMaxStreamsPerSession = 100
	DefaultMaxStreamsPerTenant  = 1000
)

// streamRetryAfter is the Retry-After of a stream refused over a cap:
// streams end when their clients leave, which no clock foretells.
const streamRetryAfter = 5 * time.Second

// streamCaps counts the event streams open at once (SSE answers, every
// route and protocol alike) per session and per tenant, and refuses one
// over either cap: each stream holds a bus subscription and its buffers,
// and every event of a session is copied to each of its subscribers.
// The counts are this process's.
type streamCaps struct {
	perSession, perTenant int // not positive: no cap

	mu       sync.Mutex // guards the following
	sessions map[string]int
	tenants  map[string]int
}

func newStreamCaps(perSession, perTenant int) *streamCaps {
	return &streamCaps{perSession: capOf(perSession, DefaultMaxStreamsPerSession), perTenant: capOf(perTenant, DefaultMaxStreamsPerTenant),
		sessions: map[string]int{}, tenants: map[string]int{}}
}

// capOf is a configured cap: def when v is 0, none when negative.
func capOf(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// open takes a stream of tenant on session (sessionID "" when the stream
// has no session yet: only the tenant's cap applies), or refuses it with
// too_many_subscribers and a retry delay. release gives it back (once).
func (c *streamCaps) open(tenant, sessionID string) (release func(), err error) {
	key := tenant + "\x00" + sessionID
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perTenant > 0 && c.tenants[tenant] >= c.perTenant {
		return nil, forge.WithRetryAfter(forge.Errorf(forge.ErrTooManySubscribers,
			"this tenant has %d event streams open, the most it may; close one or retry later", c.tenants[tenant]), streamRetryAfter)
	}
	if sessionID != "" && c.perSession > 0 && c.sessions[key] >= c.perSession {
		return nil, forge.WithRetryAfter(forge.Errorf(forge.ErrTooManySubscribers,
			"session %s has %d event streams open, the most it may; close one or retry later", sessionID, c.sessions[key]), streamRetryAfter)
	}
	c.tenants[tenant]++
	if sessionID != "" {
		c.sessions[key]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.tenants[tenant]--; c.tenants[tenant] <= 0 {
				delete(c.tenants, tenant)
			}
			if sessionID != "" {
				if c.sessions[key]--; c.sessions[key] <= 0 {
					delete(c.sessions, key)
				}
			}
		})
	}, nil
}

// tenantStreams is how many streams tenant has open.
func (c *streamCaps) tenantStreams(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tenants[tenant]
}
