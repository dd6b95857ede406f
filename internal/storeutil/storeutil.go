// Package storeutil is what the stores (sqlite, postgres) share above
// their SQL: the checks and defaults of a write, paging, and the shaping of
// what they read back. Each store keeps its own SQL and column encoding;
// the rules a conformance test holds every store to live here once.
package storeutil

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"
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
