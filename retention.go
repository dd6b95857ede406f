package forge

import (
	"context"
	"encoding/json"
	"time"
)

// Retention is an agent's retention policy (API.md, "Retention and
// listing"): a direct session of the agent idle for longer than SessionTTL
// is deleted with what it holds.
type Retention struct {
	// SessionTTL is a Go duration ("720h"); zero keeps the server's
	// default (--session-ttl), which may itself keep sessions forever.
	SessionTTL TTL `json:"session_ttl,omitempty"`
}

// Bounds of a session TTL: above ten years is forever in all but name.
// (A TTL of seconds deletes a session soon after its turn ends: the
// operator's choice; a session is never expired under a running turn.)
const (
	MinSessionTTL = time.Second
	MaxSessionTTL = 10 * 365 * 24 * time.Hour
)

// TTL is a duration written as a Go duration string in JSON.
type TTL time.Duration

func (d TTL) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *TTL) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return Errorf(ErrInvalid, "a duration is a string such as \"720h\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return Errorf(ErrInvalid, "duration %q: %v", s, err)
	}
	*d = TTL(v)
	return nil
}

// CheckSessionTTL checks a session TTL; zero is "not set".
func CheckSessionTTL(d time.Duration, field string) error {
	if d != 0 && (d < MinSessionTTL || d > MaxSessionTTL) {
		return Errorf(ErrInvalid, "%s must be between 1s and 87600h, got %s", field, d)
	}
	return nil
}

// SessionRef names a session of a tenant.
type SessionRef struct {
	Tenant string
	ID     string
}

// IdleSession is a session ExpiredSessions found, with its last update
// as it saw it: ExpireSession is told to refuse a session updated since.
type IdleSession struct {
	SessionRef
	UpdatedAt time.Time
}

// ExpiryQuery asks for sessions whose retention ran out.
type ExpiryQuery struct {
	Now time.Time
	// DefaultTTL applies to sessions of agents without their own
	// (and of deleted agents); zero keeps them.
	DefaultTTL time.Duration
	// OlderThan, when set, replaces every TTL (forge prune --older-than).
	OlderThan time.Duration
	Limit     int
}

// PurgeResult is what one PurgeSession call removed.
type PurgeResult struct {
	// Done is set once the session's last row is gone.
	Done bool
	// Rows counts the rows deleted, Files the files deleted because no
	// message references them any more.
	Rows  int
	Files int
}

// RetentionStore deletes what outlived its retention. The sweeper
// (package retention) drives it: expire, then purge in small batches.
type RetentionStore interface {
	// ExpiredSessions lists up to q.Limit live direct sessions, across
	// tenants, last updated before q.Now minus their TTL, with no running
	// or queued turn and named by no schedule, least recently updated
	// first.
	ExpiredSessions(ctx context.Context, q ExpiryQuery) ([]IdleSession, error)
	// ExpireSession soft-deletes the session when it is still idle: last
	// updated before idleBefore, no running or queued turn. Otherwise it
	// changes nothing and fails with ErrConflict (a turn won the race);
	// ErrNotFound when the session is gone.
	ExpireSession(ctx context.Context, tenant, id string, idleBefore time.Time) error
	// DeletedSessions lists up to limit sessions, across tenants,
	// soft-deleted before before.
	DeletedSessions(ctx context.Context, before time.Time, limit int) ([]SessionRef, error)
	// PurgeSession hard-deletes a soft-deleted session, at most about
	// budget rows per call (one short transaction), and the files only its
	// messages referenced. Call it until Done. A live session is
	// ErrInvalid: it is never purged.
	PurgeSession(ctx context.Context, tenant, id string, budget int) (PurgeResult, error)
	// ReclaimSpace returns freed pages to the file system where the
	// backend keeps them (SQLite's incremental vacuum; at most pages per
	// call); it reports how many it returned.
	ReclaimSpace(ctx context.Context, pages int) (int, error)
}
