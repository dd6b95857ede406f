package forge

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on. The HTTP layer maps each to a status
// and an API error code in one place (httpapi).
var (
	ErrInvalid              = errors.New("invalid_request")
	ErrUnauthorized         = errors.New("unauthorized")
	ErrNotFound             = errors.New("not_found")
	ErrTurnInProgress       = errors.New("turn_in_progress")
	ErrPendingActions       = errors.New("pending_actions")
	ErrUnknownCall          = errors.New("unknown_call")
	ErrDuplicateCall        = errors.New("duplicate_call")
	ErrIncompleteResolution = errors.New("incomplete_resolution")
	ErrConflict             = errors.New("conflict")
	ErrTooLarge             = errors.New("payload_too_large")

	// ErrTurnEnded is returned by a write fenced on a turn that already has
	// its terminal status: the first terminal write won, this one lost.
	ErrTurnEnded = errors.New("turn already ended")
	// ErrLocked means another process owns the database.
	ErrLocked = errors.New("database is owned by another process")
)

// codedError carries a human message and wraps a sentinel.
type codedError struct {
	kind error
	msg  string
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.kind }

// Errorf returns an error that wraps kind (one of the sentinels) and reads as
// the formatted message: errors.Is(err, kind) holds, and the message is what
// the API shows the client.
func Errorf(kind error, format string, args ...any) error {
	return &codedError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the API code of err ("invalid_request", ...), or
// "internal" when err wraps no sentinel.
func ErrorCode(err error) string {
	for _, s := range []error{ErrInvalid, ErrUnauthorized, ErrNotFound, ErrTurnInProgress,
		ErrPendingActions, ErrUnknownCall, ErrDuplicateCall, ErrIncompleteResolution,
		ErrConflict, ErrTooLarge} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "internal"
}
