// Package storeutil is what the stores (sqlite, postgres) share above
// their SQL: the checks and defaults of a write, paging, and the shaping of
// what they read back. Each store keeps its own SQL and column encoding;
// the rules a conformance test holds every store to live here once.
package storeutil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
)

// Page sizes (API.md: default 100, events 1000, maximum 10000).
const (
	DefaultLimit      = 100
	DefaultEventLimit = 1000
	MaxLimit          = 10000
)

// Limit is the size of a page asked for with n: def when n is not
// positive, never more than MaxLimit.
func Limit(n, def int) int {
	if n <= 0 {
		return def
	}
	return min(n, MaxLimit)
}

// Page trims a list fetched with limit+1 rows and returns the cursor of the
// next page, "" when this page is the last.
func Page[T any](items []T, limit int, key func(T) string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, key(items[limit-1])
}

// EventsBefore is the exclusive upper seq bound of an EventQuery: Before,
// or no bound when it is not positive.
func EventsBefore(before int64) int64 {
	if before <= 0 {
		return 1<<63 - 1
	}
	return before
}

// OrNow returns t, or now() when t is zero.
func OrNow(t time.Time, now func() time.Time) time.Time {
	if t.IsZero() {
		return now()
	}
	return t
}

// Or returns t, or def when t is zero.
func Or(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// JSON encodes v as JSON text for a nullable column: null is false for a
// nil pointer, slice, map or interface (stored as NULL, so nil and empty
// values survive a round trip).
func JSON(v any) (text string, null bool, err error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
		if rv.IsNil() {
			return "", true, nil
		}
	case reflect.Invalid:
		return "", true, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false, fmt.Errorf("encode %T: %w", v, err)
	}
	return string(b), false, nil
}

// WriteTimer holds the function a store's ObserveWrites sets.
type WriteTimer struct {
	f atomic.Pointer[func(time.Duration, error)]
}

// Set makes every later write call f with how long it took and its error;
// nil stops it.
func (w *WriteTimer) Set(f func(d time.Duration, err error)) {
	if f == nil {
		w.f.Store(nil)
		return
	}
	w.f.Store(&f)
}

// Time runs write, and tells the function set how long it took.
func (w *WriteTimer) Time(write func() error) error {
	observe := w.f.Load()
	if observe == nil {
		return write()
	}
	start := time.Now()
	err := write()
	(*observe)(time.Since(start), err)
	return err
}

// SessionCursor is the position of a session in a list by last update:
// its update time (Unix nanoseconds) and id.
type SessionCursor struct {
	UpdatedAt int64
	ID        string
}

// ParseSessionCursor reads a cursor of ListSessions; "" is the start.
func ParseSessionCursor(c string) (SessionCursor, bool, error) {
	if c == "" {
		return SessionCursor{}, false, nil
	}
	n, id, ok := strings.Cut(c, "_") // nanoseconds hold no '_'; ids do
	if !ok {
		return SessionCursor{}, false, forge.Errorf(forge.ErrInvalid, "cursor %q is not a cursor of this list", c)
	}
	u, err := strconv.ParseInt(n, 10, 64)
	if err != nil || id == "" {
		return SessionCursor{}, false, forge.Errorf(forge.ErrInvalid, "cursor %q is not a cursor of this list", c)
	}
	return SessionCursor{UpdatedAt: u, ID: id}, true, nil
}

// SessionCursorOf is the cursor after s.
func SessionCursorOf(s *forge.Session) string {
	return strconv.FormatInt(s.UpdatedAt.UnixNano(), 10) + "_" + s.ID
}

// CheckSessionQuery refuses filters no store can apply.
func CheckSessionQuery(q forge.SessionQuery) error {
	switch q.Status {
	case "", forge.SessionRunning, forge.SessionIdle:
	default:
		return forge.Errorf(forge.ErrInvalid, "status must be running or idle, got %q", q.Status)
	}
	for k := range q.Metadata {
		if !MetadataKey(k) {
			return forge.Errorf(forge.ErrInvalid, "metadata key %q: keys are 1 to 64 letters, digits, '_' or '-'", k)
		}
	}
	return nil
}

// MetadataKey reports whether k may name a metadata filter: plain enough
// to sit inside a JSON path.
func MetadataKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// historyReader is what TurnHistory reads from.
type historyReader interface {
	LatestCompaction(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.CompactionBoundary, error)
	ListMessages(ctx context.Context, tenant string, q forge.MessageQuery) ([]*forge.Message, string, error)
	GetSnapshot(ctx context.Context, tenant, turnID string) (*forge.Snapshot, error)
}

// sessionTurnReader is what SessionWithTip reads with.
type sessionTurnReader interface {
	GetSession(ctx context.Context, tenant, id string) (*forge.Session, error)
	GetTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
}

// SessionWithTip is forge.SessionStore's SessionWithTip made of its two
// reads: for a store where a read costs no round trip.
func SessionWithTip(ctx context.Context, s sessionTurnReader, tenant, id string) (*forge.Session, *forge.Turn, error) {
	ses, err := s.GetSession(ctx, tenant, id)
	if err != nil || ses.TipTurnID == nil {
		return ses, nil, err
	}
	tip, err := s.GetTurn(ctx, tenant, id, *ses.TipTurnID)
	if err != nil {
		return nil, nil, err
	}
	return ses, tip, nil
}

// TurnHistory is forge.MessageStore's TurnHistory made of its three reads,
// one after the other: for a store where a read costs no round trip.
func TurnHistory(ctx context.Context, s historyReader, tenant string, q forge.MessageQuery) (*forge.TurnHistory, error) {
	if q.TipTurnID == "" {
		return nil, forge.Errorf(forge.ErrInvalid, "turn history: no tip turn")
	}
	q.From = ""
	var h forge.TurnHistory
	var err error
	if h.Boundary, err = s.LatestCompaction(ctx, tenant, q); err != nil {
		return nil, err
	}
	if h.Messages, h.Next, err = s.ListMessages(ctx, tenant, q); err != nil {
		return nil, err
	}
	switch h.Snapshot, err = s.GetSnapshot(ctx, tenant, q.TipTurnID); {
	case errors.Is(err, forge.ErrNotFound):
		h.Snapshot = nil
	case err != nil:
		return nil, err
	}
	return &h, nil
}
