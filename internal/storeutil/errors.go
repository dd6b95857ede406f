package storeutil

import (
	"context"
	"errors"
	"strings"

	"github.com/forge-runtime/forge"
)

// DBError classifies err, met by a store on the way to its database, for
// callers that branch on forge's sentinels (and the HTTP layer, which
// answers 503 store_error for forge.ErrStore and 500 for what it cannot
// place). Nil stays nil. An error that already wraps a sentinel (an
// answer about the data such as ErrNotFound, or ErrStore itself) and the
// end of the caller's own context are returned as they are. Anything else
// is a failure of the store (the database closed or unreachable, the disk
// full): it wraps forge.ErrStore and still unwraps to err, and reads as
// prefix ("sqlite", "postgres: begin") then err, the prefix written once.
func DBError(prefix string, err error) error {
	if err == nil || forge.ErrorSentinel(err) != nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix+": ") {
		msg = prefix + ": " + msg
	}
	return &storeError{msg: msg, err: err}
}

// storeError is a driver's error classified as forge.ErrStore.
type storeError struct {
	msg string
	err error
}

func (e *storeError) Error() string   { return e.msg }
func (e *storeError) Unwrap() []error { return []error{forge.ErrStore, e.err} }
