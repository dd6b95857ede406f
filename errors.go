package forge

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors callers branch on. Each has an API error code in
// errorKinds; the HTTP layer maps each code to a status in one place
// (httpapi).
var (
	ErrInvalid              = errors.New("invalid_request")
	ErrUnauthorized         = errors.New("unauthorized")
	ErrForbidden            = errors.New("forbidden")
	ErrNotFound             = errors.New("not_found")
	ErrTurnInProgress       = errors.New("turn_in_progress")
	ErrPendingActions       = errors.New("pending_actions")
	ErrUnknownCall          = errors.New("unknown_call")
	ErrDuplicateCall        = errors.New("duplicate_call")
	ErrIncompleteResolution = errors.New("incomplete_resolution")
	ErrConflict             = errors.New("conflict")
	ErrTooLarge             = errors.New("payload_too_large")
	ErrUnsupportedMediaType = errors.New("unsupported_media_type")
	// ErrUnsupportedContent refuses input the turn's model cannot take
	// (an image for a text-only model).
	ErrUnsupportedContent = errors.New("unsupported_content")
	// ErrIdempotencyMismatch is an Idempotency-Key reused with another
	// request than the one it was first used with.
	ErrIdempotencyMismatch = errors.New("idempotency_mismatch")
	// ErrStore is a failure of the store itself (the database is down,
	// the disk full), as opposed to an answer about the data. A turn that
	// ends because of it has the error code CodeStoreError.
	ErrStore = errors.New("store_error")
	// ErrUnavailable refuses work this server cannot take now (it is
	// shutting down); another replica, or this one after a restart, can.
	ErrUnavailable = errors.New("unavailable")
	// ErrRateLimited refuses work over a tenant's quota (the turns of the
	// scripted provider); the refusal says when to retry (RetryAfter).
	ErrRateLimited = errors.New("rate_limited")
	// ErrTooManySubscribers refuses an event stream over the cap of
	// streams open at once on a session or for a tenant.
	ErrTooManySubscribers = errors.New("too_many_subscribers")
	// ErrSnapshotNotFound is a workspace snapshot the session does not
	// have (never taken, pruned, or another session's).
	ErrSnapshotNotFound = errors.New("snapshot not found")

	// ErrTurnEnded is returned by a write fenced on a turn that already has
	// its terminal status: the first terminal write won, this one lost.
	ErrTurnEnded = errors.New("turn already ended")
	// ErrLocked means another process owns the database.
	ErrLocked = errors.New("database is owned by another process")
)

// CodeStoreError is the error code of a turn that ended because its writes
// kept failing (Turn.Error.Code; see also the other Code constants): what it
// could not save was not done (no tool ran on an unsaved state). It is also
// ErrStore's API code.
const CodeStoreError = "store_error"

// ErrorKind pairs a sentinel with its API error code.
type ErrorKind struct {
	Err  error
	Code string
}

// errorKinds is the one table of API error codes: every sentinel above,
// with its code. Several sentinels may share a code; the first listed is
// the code's own sentinel (ErrorForCode).
var errorKinds = []ErrorKind{
	{ErrInvalid, "invalid_request"},
	{ErrUnauthorized, "unauthorized"},
	{ErrForbidden, "forbidden"},
	{ErrNotFound, "not_found"},
	{ErrTurnInProgress, "turn_in_progress"},
	{ErrPendingActions, "pending_actions"},
	{ErrUnknownCall, "unknown_call"},
	{ErrDuplicateCall, "duplicate_call"},
	{ErrIncompleteResolution, "incomplete_resolution"},
	{ErrConflict, "conflict"},
	{ErrTooLarge, "payload_too_large"},
	{ErrUnsupportedMediaType, "unsupported_media_type"},
	{ErrUnsupportedContent, "unsupported_content"},
	{ErrIdempotencyMismatch, "idempotency_mismatch"},
	{ErrStore, CodeStoreError},
	{ErrUnavailable, "unavailable"},
	{ErrRateLimited, "rate_limited"},
	{ErrTooManySubscribers, "too_many_subscribers"},
	{ErrTurnEnded, "conflict"},
	{ErrSnapshotNotFound, "not_found"},
	{ErrLocked, CodeStoreError},
}

// ErrorKinds returns the table of sentinels and their API codes.
func ErrorKinds() []ErrorKind {
	return append([]ErrorKind(nil), errorKinds...)
}

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
	if k, ok := errorKindOf(err); ok {
		return k.Code
	}
	return CodeInternal
}

// ErrorSentinel returns the sentinel of the table that err wraps, nil when
// it wraps none.
func ErrorSentinel(err error) error {
	if k, ok := errorKindOf(err); ok {
		return k.Err
	}
	return nil
}

func errorKindOf(err error) (ErrorKind, bool) {
	if err == nil {
		return ErrorKind{}, false
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.Err) {
			return k, true
		}
	}
	return ErrorKind{}, false
}

// ErrorForCode returns the sentinel of an API code (ErrNotFound for
// "not_found"), nil for a code without one.
func ErrorForCode(code string) error {
	for _, k := range errorKinds {
		if k.Code == code {
			return k.Err
		}
	}
	return nil
}

// retryAfterError is a refusal that says when to retry.
type retryAfterError struct {
	error
	after time.Duration
}

func (e *retryAfterError) Unwrap() error { return e.error }

// WithRetryAfter returns err, telling a client to retry after d (HTTP
// answers carry it as a Retry-After header, in whole seconds).
func WithRetryAfter(err error, d time.Duration) error {
	return &retryAfterError{error: err, after: d}
}

// RetryAfter returns how long err says to wait before retrying; ok is
// false when it says nothing.
func RetryAfter(err error) (d time.Duration, ok bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	return 0, false
}
