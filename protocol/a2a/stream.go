package a2a

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/sse"
	"github.com/forge-runtime/forge/protocol"
)

// StatusUpdate is A2A's TaskStatusUpdateEvent.
type StatusUpdate struct {
	Kind      string     `json:"kind"` // "status-update"
	TaskID    string     `json:"taskId"`
	ContextID string     `json:"contextId"`
	Status    TaskStatus `json:"status"`
	Final     bool       `json:"final"`
}

// ArtifactUpdate is A2A's TaskArtifactUpdateEvent.
type ArtifactUpdate struct {
	Kind      string   `json:"kind"` // "artifact-update"
	TaskID    string   `json:"taskId"`
	ContextID string   `json:"contextId"`
	Artifact  Artifact `json:"artifact"`
	Append    bool     `json:"append"`
	LastChunk bool     `json:"lastChunk"`
}

// streamMessage serves message/stream: it starts the turn and streams its
// task: the Task (submitted), status-update working, the text as
// artifact-update chunks, then the final status-update. An error before
// the stream starts is returned (the caller answers it as JSON).
func (h *handler) streamMessage(w http.ResponseWriter, r *http.Request, tenant string, a *forge.Agent, id json.RawMessage, raw json.RawMessage) error {
	p, err := h.parseSend(r.Context(), tenant, a, raw)
	if err != nil {
		return err
	}
	defer p.closeFiles()
	release, err := h.env.Open(tenant, p.ses.ID)
	if err != nil {
		protocol.SetRetryAfter(w, err)
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The turn outlives a client that hangs up: tasks/resubscribe
	// re-attaches to it.
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, p.ses.ID, engine.TurnRequest{Input: p.input})
	if err != nil {
		return err
	}
	first := task(turn)
	if !turn.Ended() {
		first.Status = TaskStatus{State: "submitted", Timestamp: stamp(turn.CreatedAt)}
	}
	h.pump(ctx, cancel, w, p.ses, turn.ID, id, first, events)
	return nil
}

// resubscribe serves tasks/resubscribe: the task as it is now, then (while
// its turn runs) the rest of its stream from the turn's events; an ended
// task's stream is its Task and final status-update.
func (h *handler) resubscribe(w http.ResponseWriter, r *http.Request, tenant string, a *forge.Agent, id json.RawMessage, raw json.RawMessage) error {
	t, err := h.lookup(r.Context(), tenant, a, raw)
	if err != nil {
		return err
	}
	ses, err := h.env.Store.GetSession(r.Context(), tenant, t.SessionID)
	if err != nil {
		return err
	}
	release, err := h.env.Open(tenant, ses.ID)
	if err != nil {
		protocol.SetRetryAfter(w, err)
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if t.Ended() {
		sw := sse.NewWriter(w, sse.WriteWait)
		h.frame(sw, id, task(t))
		h.frame(sw, id, final(t))
		_ = sw.Start() // writes what is buffered
		sw.End()
		return nil
	}
	// A running task: the snapshot has no artifacts (a running turn has
	// no output), so the replay from turn.created brings all its text.
	h.pump(ctx, cancel, w, ses, t.ID, id, task(t), protocol.TurnEvents(ctx, h.env.Runtime, tenant, ses.ID, t.ID))
	return nil
}

// final is an ended turn's final status-update.
func final(t *forge.Turn) StatusUpdate {
	return StatusUpdate{Kind: "status-update", TaskID: t.ID, ContextID: t.SessionID, Status: task(t).Status, Final: true}
}

func stamp(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }

// frame appends one SSE event holding a JSON-RPC response whose result is
// v.
func (h *handler) frame(sw *sse.Writer, id json.RawMessage, v any) {
	b, err := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: id, Result: v})
	if err != nil { // our own types: cannot fail
		h.env.Log.Error("a2a stream frame", "err", err)
		return
	}
	sw.Event(0, "", b)
}

// pump streams a turn's events as A2A stream responses after first. The
// turn's text parts (main thread) are one artifact, <turn>-output, as in
// the Task: a part's first chunk replaces it (append false), the rest
// append, and a last empty chunk (lastChunk true) closes it when the turn
// ends, so the artifact ends as the turn's output, the last text part.
func (h *handler) pump(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, ses *forge.Session, turnID string, id json.RawMessage, first *Task, events iter.Seq2[forge.Event, error]) {
	w.Header().Set("Forge-Turn-Id", turnID)
	sw := sse.NewWriter(w, sse.WriteWait)
	h.frame(sw, id, first) // written as the stream starts
	proj := protocol.NewProjector(ses.MainThreadID)
	artifactID := turnID + "-output"
	text := map[string]bool{} // text parts' ids
	fresh, chunks := false, 0 // a part started and has no chunk yet; chunks sent
	var runs protocol.Runs
	sse.Pump(ctx, cancel, sw, h.env.KeepAlive, events, func(ev forge.Event, err error) bool {
		if err != nil || runs.Starts(ev) {
			sw.Urgent()
		}
		if err == nil {
			err = proj.Apply(ev, func(s protocol.Step) {
				switch s.Kind {
				case protocol.TurnStarted:
					h.frame(sw, id, StatusUpdate{Kind: "status-update", TaskID: turnID, ContextID: ses.ID,
						Status: TaskStatus{State: "working", Timestamp: stamp(ev.CreatedAt)}})
				case protocol.PartStarted:
					if s.Part.Type == forge.PartText {
						text[s.PartID], fresh = true, true
					}
				case protocol.PartDelta:
					if !text[s.PartID] || s.Text == "" {
						return
					}
					h.frame(sw, id, ArtifactUpdate{Kind: "artifact-update", TaskID: turnID, ContextID: ses.ID,
						Artifact: Artifact{ArtifactID: artifactID, Parts: []Part{{Kind: "text", Text: s.Text}}}, Append: !fresh})
					fresh = false
					chunks++
				case protocol.TurnDone:
					if chunks > 0 {
						h.frame(sw, id, ArtifactUpdate{Kind: "artifact-update", TaskID: turnID, ContextID: ses.ID,
							Artifact: Artifact{ArtifactID: artifactID, Parts: []Part{{Kind: "text"}}}, Append: true, LastChunk: true})
					}
					t := *s.Turn
					t.SessionID = ses.ID
					h.frame(sw, id, final(&t))
				}
			})
		}
		if err != nil {
			_, _, msg := h.env.Classify(err)
			h.env.Log.Warn("a2a stream ended by an error", "turn", turnID, "err", err)
			b, _ := json.Marshal(rpcResponse{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: codeInternal, Message: msg}})
			sw.Event(0, "", b)
			return true
		}
		return proj.Done()
	}, nil)
}
