package protocol

import (
	"context"
	"iter"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// Runtime is the part of the engine the protocol handlers call: the same
// methods httpapi.Runtime has for turns and events.
type Runtime interface {
	StartTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, error)
	StreamTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, iter.Seq2[forge.Event, error], error)
	WaitTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
	Cancel(ctx context.Context, tenant, sessionID, reason string) (*forge.Turn, error)
	Events(ctx context.Context, tenant, sessionID string, q engine.EventsQuery) iter.Seq2[forge.Event, error]
	// CheckOutputSchema validates a request's output schema before a
	// session is made for it.
	CheckOutputSchema(s *forge.OutputSchema, field string) error
}

// Env is what the server mounting a protocol hands its handlers.
type Env struct {
	Store   forge.Store
	Runtime Runtime
	// Tenant authenticates a request and returns its tenant.
	Tenant func(r *http.Request) (string, error)
	// Decode reads a request's JSON body into dst (a pointer to a struct)
	// with the server's limits: size, nesting, valid UTF-8, no unknown or
	// repeated field. required false accepts an empty body.
	Decode func(w http.ResponseWriter, r *http.Request, dst any, required bool) error
	// Classify maps an error to its HTTP status, Forge error code and
	// client-facing message (a 5xx never shows the error's own text).
	Classify  func(err error) (status int, code, message string)
	Log       *slog.Logger
	Clock     forge.Clock
	IDs       forge.IDGen
	KeepAlive time.Duration
	// OpenStream, when set, takes a slot of the server's caps on event
	// streams open at once, for a stream of tenant on sessionID, before
	// the stream starts (or its turn does); over a cap it refuses with
	// forge.ErrTooManySubscribers, saying when to retry. release gives the
	// slot back once the stream has ended. Nil: no cap.
	OpenStream func(tenant, sessionID string) (release func(), err error)
	// Files keeps uploaded files (nil: the server keeps none), at most
	// MaxFileBytes each.
	Files        forge.FileStore
	MaxFileBytes int64
}

// Open takes a stream slot through env.OpenStream; release is never nil.
func (env Env) Open(tenant, sessionID string) (release func(), err error) {
	if env.OpenStream == nil {
		return func() {}, nil
	}
	return env.OpenStream(tenant, sessionID)
}

// TurnEvents returns every event of a turn from its turn.created: the
// stored log, then (while it runs) the live tail, ending after turn.done.
func TurnEvents(ctx context.Context, rt Runtime, tenant, sessionID, turnID string) iter.Seq2[forge.Event, error] {
	return rt.Events(ctx, tenant, sessionID, engine.EventsQuery{TurnID: turnID})
}

// StoredTurnEvents yields a turn's stored events in seq order, page by
// page (no live tail: for reading a turn as it is now).
func StoredTurnEvents(ctx context.Context, store forge.Store, tenant, sessionID, turnID string) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		after := int64(0)
		for {
			page, err := store.ListEvents(ctx, tenant, forge.EventQuery{SessionID: sessionID, TurnID: turnID, After: after, Limit: 1000})
			if err != nil {
				yield(forge.Event{}, err)
				return
			}
			for _, ev := range page {
				if !yield(ev, nil) {
					return
				}
				after = ev.Seq
			}
			if len(page) < 1000 {
				return
			}
		}
	}
}

// SetRetryAfter sets the Retry-After header (whole seconds, at least 1)
// of an error answer when err says when to retry (forge.RetryAfter: a
// quota, a cap on streams). Call it before writing the answer.
func SetRetryAfter(w http.ResponseWriter, err error) {
	if d, ok := forge.RetryAfter(err); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(d.Seconds()))), 10))
	}
}

// Detach returns r's context without its cancellation: a state change the
// server accepted (starting a turn, cancelling one) runs to its end even
// if the client hangs up.
func Detach(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }

// Runs tells a stream's frames that start a run from those that continue
// one, for sse.Writer.Urgent: a delta after a delta continues the text
// being streamed and may wait a few milliseconds for company; any other
// event, and the first delta after one, is what a reader waits for.
type Runs struct {
	last string // the type of the previous event
}

// Starts reports whether ev starts a run, and remembers it.
func (r *Runs) Starts(ev forge.Event) bool {
	starts := ev.Type != forge.EventModelDelta || r.last != forge.EventModelDelta
	r.last = ev.Type
	return starts
}
