package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"iter"
	"net/http"
	"strconv"

	"github.com/forge-runtime/forge"
)

// TurnRequest is the body of POST /v1/sessions/{sid}/turns (the stream flag
// is set by StreamTurn).
type TurnRequest struct {
	// Input holds one message, or the resolutions of open calls.
	Input []forge.Input `json:"input"`
	// PreviousTurnID forks from that turn; empty chains from the session tip.
	PreviousTurnID string `json:"previous_turn_id,omitempty"`
	// NewRoot starts with no history.
	NewRoot bool `json:"new_root,omitempty"`
	// Background makes CreateTurn return at once with the running turn (202).
	Background bool `json:"background,omitempty"`
	// Supersede cancels a running turn of the session instead of failing
	// with turn_in_progress.
	Supersede bool `json:"supersede,omitempty"`
	// IfBusy is what the turn does while another runs: "reject" (the
	// default), "enqueue" (it is stored queued and runs when the turns
	// before it end) or "interrupt" (as Supersede).
	IfBusy string `json:"if_busy,omitempty"`
	// Overrides are the turn's per-request settings (instructions,
	// temperature, top_p, max_output_tokens, client tools of the turn,
	// output_schema); the turn records them. A locked agent refuses them.
	Overrides *forge.TurnOverrides `json:"overrides,omitempty"`
	// IdempotencyKey, when set, is sent as the Idempotency-Key header: a
	// retry with the same key returns the first answer instead of starting a
	// second turn.
	IdempotencyKey string `json:"-"`
	// Stream is set by StreamTurn and cleared by CreateTurn; callers need
	// not touch it.
	Stream bool `json:"stream,omitempty"`
}

// Message returns the input of a turn that sends one user message.
func Message(text string) []forge.Input {
	return []forge.Input{{Type: forge.InputMessage, Text: text}}
}

// Approve resolves an approval call.
func Approve(callID string, approved bool, reason string) forge.Input {
	return forge.Input{Type: forge.InputApproval, CallID: callID, Approved: &approved, Reason: reason}
}

// ToolResult resolves a client-tool call with its output.
func ToolResult(callID, output string, isError bool) forge.Input {
	return forge.Input{Type: forge.InputToolResult, CallID: callID, Output: &output, IsError: isError}
}

// AuthToken resolves an auth call.
func AuthToken(callID, token string) forge.Input {
	return forge.Input{Type: forge.InputAuth, CallID: callID, Token: token}
}

func idemHeader(key string) http.Header {
	if key == "" {
		return nil
	}
	return http.Header{"Idempotency-Key": {key}}
}

func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "forge-go-" + hex.EncodeToString(b[:])
}

func turnsPath(sessionID string) string { return "/v1/sessions/" + seg(sessionID) + "/turns" }

// CreateTurn starts a turn. Without req.Background it waits for the turn to
// end and returns it whatever its status (errored included: check Status
// and Error). With req.Background it returns the running turn at once; poll
// GetTurn or follow TurnEvents.
func (c *Client) CreateTurn(ctx context.Context, sessionID string, req TurnRequest) (*forge.Turn, error) {
	req.Stream = false
	var out forge.Turn
	if _, err := c.do(ctx, http.MethodPost, turnsPath(sessionID), nil, req, idemHeader(req.IdempotencyKey), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTurn returns a turn.
func (c *Client) GetTurn(ctx context.Context, sessionID, turnID string) (*forge.Turn, error) {
	var out forge.Turn
	if _, err := c.do(ctx, http.MethodGet, turnsPath(sessionID)+"/"+seg(turnID), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTurns returns a page of a session's turns.
func (c *Client) ListTurns(ctx context.Context, sessionID string, opts ListOptions) (*Page[forge.Turn], error) {
	return list[forge.Turn](ctx, c, turnsPath(sessionID), opts.query(nil))
}

// CancelRequest is the body of POST /v1/sessions/{sid}/cancel.
type CancelRequest struct {
	Reason         string `json:"reason,omitempty"`
	IdempotencyKey string `json:"-"`
}

// Cancel cancels the session's running turn and returns it. When nothing
// runs the error is a 409 conflict (IsConflict, forge.ErrConflict).
func (c *Client) Cancel(ctx context.Context, sessionID string, req CancelRequest) (*forge.Turn, error) {
	var out forge.Turn
	if _, err := c.do(ctx, http.MethodPost, "/v1/sessions/"+seg(sessionID)+"/cancel", nil, req, idemHeader(req.IdempotencyKey), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Compact runs a compaction of the session now, as a turn of its own. With
// background it returns the running turn at once.
func (c *Client) Compact(ctx context.Context, sessionID string, background bool) (*forge.Turn, error) {
	var body any
	if background {
		body = map[string]bool{"background": true}
	}
	var out forge.Turn
	if _, err := c.do(ctx, http.MethodPost, "/v1/sessions/"+seg(sessionID)+"/compact", nil, body, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RestoreWorkspace restores the session's sandbox files to a workspace
// snapshot, the id a step-finish part names (forge.StepFinishData.Snapshot).
// A running turn refuses it (turn_in_progress).
func (c *Client) RestoreWorkspace(ctx context.Context, sessionID, snapshotID string) (*forge.WorkspaceRestore, error) {
	var out forge.WorkspaceRestore
	body := map[string]string{"snapshot": snapshotID}
	if _, err := c.do(ctx, http.MethodPost, "/v1/sessions/"+seg(sessionID)+"/sandbox/restore", nil, body, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WorkspaceSnapshots lists the workspace snapshots the session's sandbox
// keeps, oldest first.
func (c *Client) WorkspaceSnapshots(ctx context.Context, sessionID string) ([]forge.WorkspaceSnapshotInfo, error) {
	var out struct {
		Data []forge.WorkspaceSnapshotInfo `json:"data"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/sessions/"+seg(sessionID)+"/sandbox/snapshots", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// EventsOptions select stored events for ListEvents.
type EventsOptions struct {
	// TurnID limits the list to one turn's events; empty lists the session's.
	TurnID string
	// After lists events with seq > After.
	After int64
	ListOptions
}

// ListEvents returns stored events (no deltas) in seq order, as JSON pages.
func (c *Client) ListEvents(ctx context.Context, sessionID string, opts EventsOptions) (*Page[forge.Event], error) {
	q := opts.query(nil)
	if opts.After > 0 {
		q.Set("after", strconv.FormatInt(opts.After, 10))
	}
	return list[forge.Event](ctx, c, eventsPath(sessionID, opts.TurnID), q)
}

func eventsPath(sessionID, turnID string) string {
	if turnID == "" {
		return "/v1/sessions/" + seg(sessionID) + "/events"
	}
	return turnsPath(sessionID) + "/" + seg(turnID) + "/events"
}

// StreamTurn starts a turn and streams its events, from turn.created to
// turn.done (the last event yielded). When the connection drops it resumes
// the turn's event stream with Last-Event-ID, so no event is lost or
// repeated; if it drops before the first event, the POST is retried with
// the same Idempotency-Key (one is generated when req has none), which the
// server answers with the turn it already started.
//
// Errors are yielded as the last element: an *APIError when the server
// refuses the turn, a transport error when reconnecting failed, ctx.Err()
// when ctx ends. Breaking out of the loop closes the connection; the turn
// keeps running on the server.
func (c *Client) StreamTurn(ctx context.Context, sessionID string, req TurnRequest) iter.Seq2[forge.Event, error] {
	req.Stream = true
	req.Background = false
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = newIdempotencyKey()
	}
	s := &stream{c: c, sessionID: sessionID, untilDone: true, post: &req}
	return s.run(ctx)
}

// TurnEvents follows a turn's events with seq > after: live while the turn
// runs, from the stored log once it has ended. The sequence ends after
// turn.done.
func (c *Client) TurnEvents(ctx context.Context, sessionID, turnID string, after int64) iter.Seq2[forge.Event, error] {
	s := &stream{c: c, sessionID: sessionID, turnID: turnID, untilDone: true, last: after}
	return s.run(ctx)
}

// SessionEvents follows a session's events with seq > after, across turns,
// until ctx ends or reconnecting fails.
func (c *Client) SessionEvents(ctx context.Context, sessionID string, after int64) iter.Seq2[forge.Event, error] {
	s := &stream{c: c, sessionID: sessionID, last: after}
	return s.run(ctx)
}

// QueuedTurns returns the session's queued turns in the order they will
// run (GET /v1/sessions/{sid}/turns?status=queued), up to limit (0: the
// server's default).
func (c *Client) QueuedTurns(ctx context.Context, sessionID string, limit int) ([]forge.Turn, error) {
	q := ListOptions{Limit: limit}.query(nil)
	q.Set("status", "queued")
	p, err := list[forge.Turn](ctx, c, turnsPath(sessionID), q)
	if err != nil {
		return nil, err
	}
	return p.Data, nil
}
