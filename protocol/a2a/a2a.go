// Package a2a serves each agent as an Agent2Agent (A2A, v0.3) agent at
// /a2a/{agent}: its agent card and the JSON-RPC methods message/send,
// message/stream and tasks/resubscribe (Server-Sent Events), tasks/get and
// tasks/cancel. A task is a turn, a contextId a session (API.md, "Agents
// as MCP tools and A2A agents").
//
// A turn that waits for approvals or client tools is input-required. The
// client resolves it with message/send (or message/stream) in the same
// contextId (taskId may name the waiting task) whose parts are data parts,
// each one Forge input item: {"type":"approval","call_id":..,"approved":
// true|false}, {"type":"tool_result","call_id":..,"output":".."} or
// {"type":"auth","call_id":..,"token":".."}. The answer is a new task (the
// turn that resumes).
package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/protocol"
)

// Prefix is the path prefix of every agent's endpoint.
const Prefix = "/a2a/"

// protocolVersion is the A2A version the card declares.
const protocolVersion = "0.3.0"

const maxBody = 4 << 20

// JSON-RPC error codes (JSON-RPC 2.0 and A2A's own).
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
	codeTaskNotFound   = -32001
	codeNotCancelable  = -32002
	codeUnsupported    = -32004
)

// Protocol is the A2A endpoints as an httpapi.Protocol.
type Protocol struct{}

func (Protocol) Prefix() string { return Prefix }

func (Protocol) WriteError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, rpcResponse{JSONRPC: "2.0", Error: &rpcError{Code: codeInvalidRequest, Message: message, Data: map[string]string{"code": code}}})
}

func (Protocol) Handler(env protocol.Env) http.Handler { return &handler{env: env} }

type handler struct{ env protocol.Env }

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return e.Message }

// Part is an A2A message part: text, or data (a Forge input item
// resolving a waiting call, or required actions in a status message).
type Part struct {
	Kind string          `json:"kind"`
	Text string          `json:"text,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
	File *FileContent    `json:"file,omitempty"`
}

// FileContent is a file part's file: its bytes (base64) or a URI. Only
// data: URIs are taken; Forge fetches nothing a client names.
type FileContent struct {
	Name     string  `json:"name,omitempty"`
	MimeType string  `json:"mimeType,omitempty"`
	Bytes    *string `json:"bytes,omitempty"`
	URI      string  `json:"uri,omitempty"`
}

// MarshalJSON writes a text part's text even when empty (a last chunk of
// a streamed artifact), which A2A requires of a text part.
func (p Part) MarshalJSON() ([]byte, error) {
	if p.Kind == "text" {
		return json.Marshal(struct {
			Kind string `json:"kind"`
			Text string `json:"text"`
		}{p.Kind, p.Text})
	}
	type plain Part
	return json.Marshal(plain(p))
}

// Message is an A2A message.
type Message struct {
	Kind      string `json:"kind"`
	Role      string `json:"role"`
	MessageID string `json:"messageId"`
	Parts     []Part `json:"parts"`
	ContextID string `json:"contextId,omitempty"`
	TaskID    string `json:"taskId,omitempty"`
}

// Task is a turn as A2A shows it.
type Task struct {
	Kind      string     `json:"kind"`
	ID        string     `json:"id"`
	ContextID string     `json:"contextId"`
	Status    TaskStatus `json:"status"`
	Artifacts []Artifact `json:"artifacts,omitempty"`
}

type TaskStatus struct {
	State     string   `json:"state"`
	Message   *Message `json:"message,omitempty"`
	Timestamp string   `json:"timestamp,omitempty"`
}

type Artifact struct {
	ArtifactID string `json:"artifactId"`
	Parts      []Part `json:"parts"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, Prefix)
	agent, tail, _ := strings.Cut(rest, "/")
	if agent == "" || len(agent) > 200 {
		Protocol{}.WriteError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
		return
	}
	tenant, err := h.env.Tenant(r)
	if err != nil {
		status, code, msg := h.env.Classify(err)
		Protocol{}.WriteError(w, status, code, msg)
		return
	}
	a, err := h.env.Store.GetAgent(r.Context(), tenant, agent)
	if err != nil {
		status, code, msg := h.env.Classify(err)
		if errors.Is(err, forge.ErrNotFound) {
			msg = fmt.Sprintf("agent %q not found", agent)
		}
		Protocol{}.WriteError(w, status, code, msg)
		return
	}
	switch {
	case tail == ".well-known/agent-card.json" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.card(r, a))
	case tail == "" && r.Method == http.MethodPost:
		h.rpc(w, r, tenant, a)
	case tail == "" || tail == ".well-known/agent-card.json":
		w.Header().Set("Allow", map[bool]string{true: "GET", false: "POST"}[tail != ""])
		Protocol{}.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method "+r.Method+" is not allowed on "+r.URL.Path)
	default:
		Protocol{}.WriteError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
	}
}

// card is the agent's A2A agent card.
func (h *handler) card(r *http.Request, a *forge.Agent) map[string]any {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	skills := []map[string]any{{"id": a.Name, "name": a.Name, "description": "Talk to the Forge agent " + a.Name + ".", "tags": []string{"forge"}}}
	for _, t := range a.Tools {
		desc := t.Description
		if desc == "" {
			desc = "The agent can use the tool " + t.Name + "."
		}
		skills = append(skills, map[string]any{"id": a.Name + "." + t.Name, "name": t.Name, "description": desc, "tags": []string{"tool"}})
	}
	return map[string]any{
		"protocolVersion":    protocolVersion,
		"name":               a.Name,
		"description":        "A Forge agent (" + a.Model + "). A task is a turn; a contextId is a Forge session.",
		"url":                scheme + "://" + r.Host + Prefix + a.Name,
		"preferredTransport": "JSONRPC",
		"version":            fmt.Sprint(a.Version),
		"capabilities":       map[string]any{"streaming": true, "pushNotifications": false},
		"defaultInputModes":  []string{"text/plain", "image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf", "text/markdown", "text/csv", "application/json"},
		"defaultOutputModes": []string{"text/plain"},
		"skills":             skills,
		"securitySchemes":    map[string]any{"bearer": map[string]string{"type": "http", "scheme": "bearer"}},
		"security":           []map[string][]string{{"bearer": {}}},
	}
}

func (h *handler) rpc(w http.ResponseWriter, r *http.Request, tenant string, a *forge.Agent) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		Protocol{}.WriteError(w, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprintf("the request body is over %d bytes", maxBody))
		return
	}
	var req rpcRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if !utf8.Valid(body) || dec.Decode(&req) != nil {
		writeJSON(w, http.StatusOK, rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: codeParse, Message: "the body is not one JSON-RPC request in valid UTF-8 JSON"}})
		return
	}
	if req.ID == nil {
		req.ID = json.RawMessage("null")
	}
	res := rpcResponse{JSONRPC: "2.0", ID: req.ID}
	var result any
	switch {
	case req.JSONRPC != "2.0":
		err = &rpcError{Code: codeInvalidRequest, Message: `jsonrpc must be "2.0"`}
	case req.Method == "message/send":
		result, err = h.send(r.Context(), tenant, a, req.Params)
	case req.Method == "tasks/get":
		result, err = h.get(r.Context(), tenant, a, req.Params)
	case req.Method == "tasks/cancel":
		result, err = h.cancel(r.Context(), tenant, a, req.Params)
	case req.Method == "message/stream":
		// Answered on the stream once it has started; before, as JSON.
		if err = h.streamMessage(w, r, tenant, a, req.ID, req.Params); err == nil {
			return
		}
	case req.Method == "tasks/resubscribe":
		if err = h.resubscribe(w, r, tenant, a, req.ID, req.Params); err == nil {
			return
		}
	default:
		err = &rpcError{Code: codeMethodNotFound, Message: "unknown method " + req.Method}
	}
	if err != nil {
		res.Error = h.rpcError(err)
	} else {
		res.Result = result
	}
	writeJSON(w, http.StatusOK, res)
}

// rpcError is err as the client may see it.
func (h *handler) rpcError(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	status, code, msg := h.env.Classify(err)
	c := codeInvalidParams
	switch {
	case status == http.StatusNotFound:
		c = codeTaskNotFound
	case status >= 500:
		c = codeInternal
		h.env.Log.Error("a2a request failed", "err", err)
	}
	return &rpcError{Code: c, Message: msg, Data: map[string]string{"code": code}}
}

// sendParams is what message/send and message/stream take: the message,
// the session it continues (contextId, or the session of taskId) and the
// turn's input.
type sendParams struct {
	ses   *forge.Session
	input []forge.Input
	// closeFiles removes what inline file parts spooled: called once the
	// turn began or was refused.
	closeFiles func()
}

// maxParts bounds the parts of one message (each is one input item).
const maxParts = 1000

func (h *handler) parseSend(ctx context.Context, tenant string, a *forge.Agent, raw json.RawMessage) (*sendParams, error) {
	var p struct {
		Message Message `json:"message"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, &rpcError{Code: codeInvalidParams, Message: "params must be {\"message\": {...}}: " + err.Error()}
	}
	if p.Message.Role != "user" {
		return nil, &rpcError{Code: codeInvalidParams, Message: `message.role must be "user"`}
	}
	if len(p.Message.Parts) > maxParts {
		return nil, &rpcError{Code: codeInvalidParams, Message: fmt.Sprintf("a message holds at most %d parts", maxParts)}
	}
	var text strings.Builder
	var input []forge.Input
	var atts []files.Attachment
	for i, part := range p.Message.Parts {
		switch part.Kind {
		case "text":
			text.WriteString(part.Text)
		case "file":
			f := part.File
			if f == nil || (f.Bytes == nil) == (f.URI == "") {
				return nil, &rpcError{Code: codeInvalidParams, Message: fmt.Sprintf("message.parts[%d]: a file part has exactly one of file.bytes (base64, with mimeType) or file.uri (a data: URI)", i)}
			}
			atts = append(atts, files.Attachment{Data: f.Bytes, URL: f.URI, MimeType: f.MimeType, Filename: f.Name})
		case "data":
			in, err := resolution(part.Data)
			if err != nil {
				return nil, &rpcError{Code: codeInvalidParams, Message: fmt.Sprintf("message.parts[%d]: %v", i, err)}
			}
			input = append(input, in)
		default:
			return nil, &rpcError{Code: codeUnsupported, Message: fmt.Sprintf("message.parts[%d] is a %q part: only text parts (and data parts resolving waiting calls) are taken", i, part.Kind)}
		}
	}
	switch {
	case len(input) > 0 && (strings.TrimSpace(text.String()) != "" || len(atts) > 0):
		return nil, &rpcError{Code: codeInvalidParams, Message: "a message holds either text and files or data parts resolving waiting calls, not both"}
	case len(input) == 0 && strings.TrimSpace(text.String()) == "":
		return nil, &rpcError{Code: codeInvalidParams, Message: "the message has no text"}
	case len(input) == 0:
		input = []forge.Input{{Type: forge.InputMessage, Text: text.String()}}
	}
	closeFiles := func() {}
	if len(atts) > 0 {
		// Checked (type, size, base64) and spooled now, before anything is
		// stored; the engine stores them with the turn.
		resolved, closer, err := files.Resolve(atts, tenant, h.env.MaxFileBytes, "message.parts")
		if err != nil {
			closer()
			return nil, err
		}
		input[0].Files, closeFiles = resolved, closer
	}
	ok := false
	defer func() {
		if !ok {
			closeFiles()
		}
	}()
	contextID := p.Message.ContextID
	if p.Message.TaskID != "" {
		t, err := h.lookup(ctx, tenant, a, mustJSON(map[string]string{"id": p.Message.TaskID}))
		if err != nil {
			return nil, err
		}
		if contextID != "" && contextID != t.SessionID {
			return nil, &rpcError{Code: codeInvalidParams, Message: fmt.Sprintf("task %s is not of contextId %s", t.ID, contextID)}
		}
		contextID = t.SessionID
	}
	ses, err := h.session(ctx, tenant, a, contextID)
	if err != nil {
		return nil, err
	}
	ok = true
	return &sendParams{ses: ses, input: input, closeFiles: closeFiles}, nil
}

// resolution decodes a data part as a Forge input item resolving a
// waiting call (the engine checks it names an open call).
func resolution(data json.RawMessage) (forge.Input, error) {
	var in forge.Input
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if len(data) == 0 || dec.Decode(&in) != nil {
		return in, errors.New(`a data part must be one Forge input item: {"type":"approval","call_id":..,"approved":..}, {"type":"tool_result","call_id":..,"output":..} or {"type":"auth","call_id":..,"token":..}`)
	}
	if in.Type != forge.InputApproval && in.Type != forge.InputToolResult && in.Type != forge.InputAuth {
		return in, fmt.Errorf("a data part's type must be approval, tool_result or auth, got %q", in.Type)
	}
	if len(in.Files) > 0 || in.Text != "" {
		return in, errors.New("a data part resolving a call takes no text or files")
	}
	return in, nil
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// send runs one turn for the message and answers its task once the turn
// has ended or paused.
func (h *handler) send(ctx context.Context, tenant string, a *forge.Agent, raw json.RawMessage) (*Task, error) {
	p, err := h.parseSend(ctx, tenant, a, raw)
	if err != nil {
		return nil, err
	}
	defer p.closeFiles()
	ses := p.ses
	turn, err := h.env.Runtime.StartTurn(ctx, tenant, ses.ID, engine.TurnRequest{Input: p.input})
	if err != nil {
		return nil, err
	}
	final, err := h.env.Runtime.WaitTurn(ctx, tenant, ses.ID, turn.ID)
	if err != nil {
		if ctx.Err() != nil {
			_, _ = h.env.Runtime.Cancel(context.WithoutCancel(ctx), tenant, ses.ID, "the A2A request was cancelled")
		}
		return nil, err
	}
	return task(final), nil
}

func (h *handler) session(ctx context.Context, tenant string, a *forge.Agent, contextID string) (*forge.Session, error) {
	if contextID != "" {
		ses, err := h.env.Store.GetSession(ctx, tenant, contextID)
		if err != nil {
			return nil, err
		}
		if ses.Kind != forge.KindDirect || ses.Agent != a.Name {
			return nil, &rpcError{Code: codeInvalidParams, Message: fmt.Sprintf("contextId %s is not a conversation with agent %s", contextID, a.Name)}
		}
		return ses, nil
	}
	now := h.env.Clock.Now()
	ses := &forge.Session{ID: h.env.IDs.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: a.Name,
		Title: "a2a", MainThreadID: h.env.IDs.New(forge.PrefixThread), Metadata: json.RawMessage(`{"source":"a2a"}`),
		CreatedAt: now, UpdatedAt: now}
	if err := h.env.Store.CreateSession(ctx, ses); err != nil {
		return nil, err
	}
	return ses, nil
}

// lookup finds the task (turn) id names, among this agent's sessions.
func (h *handler) lookup(ctx context.Context, tenant string, a *forge.Agent, raw json.RawMessage) (*forge.Turn, error) {
	var p struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.ID == "" {
		return nil, &rpcError{Code: codeInvalidParams, Message: `params must be {"id": "<task id>"}`}
	}
	notFound := &rpcError{Code: codeTaskNotFound, Message: fmt.Sprintf("task %q not found", p.ID)}
	t, err := h.env.Store.GetTurnByID(ctx, tenant, p.ID)
	if errors.Is(err, forge.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	ses, err := h.env.Store.GetSession(ctx, tenant, t.SessionID)
	if errors.Is(err, forge.ErrNotFound) || err == nil && ses.Agent != a.Name {
		return nil, notFound
	}
	return t, err
}

func (h *handler) get(ctx context.Context, tenant string, a *forge.Agent, raw json.RawMessage) (*Task, error) {
	t, err := h.lookup(ctx, tenant, a, raw)
	if err != nil {
		return nil, err
	}
	return task(t), nil
}

func (h *handler) cancel(ctx context.Context, tenant string, a *forge.Agent, raw json.RawMessage) (*Task, error) {
	t, err := h.lookup(ctx, tenant, a, raw)
	if err != nil {
		return nil, err
	}
	if t.Ended() {
		return nil, &rpcError{Code: codeNotCancelable, Message: fmt.Sprintf("task %s has ended (%s)", t.ID, task(t).Status.State)}
	}
	if _, err := h.env.Runtime.Cancel(ctx, tenant, t.SessionID, "cancelled through A2A tasks/cancel"); err != nil && !errors.Is(err, forge.ErrTurnEnded) {
		return nil, err
	}
	if t, err = h.env.Runtime.WaitTurn(ctx, tenant, t.SessionID, t.ID); err != nil {
		return nil, err
	}
	return task(t), nil
}

// task is a turn as an A2A task: done is completed (input-required when
// it waits for approvals or client tools), errored failed, cancelled
// canceled, running working.
func task(t *forge.Turn) *Task {
	out := &Task{Kind: "task", ID: t.ID, ContextID: t.SessionID, Status: TaskStatus{State: "working"}}
	if t.EndedAt != nil {
		out.Status.Timestamp = t.EndedAt.UTC().Format(time.RFC3339Nano)
	}
	text := ""
	if t.Output != nil {
		text = t.Output.Text
	}
	switch t.Status {
	case forge.TurnDone:
		out.Status.State = "completed"
		if len(t.RequiredActions) > 0 {
			ra := t.RequiredActions[0]
			out.Status.State = "input-required"
			out.Status.Message = &Message{Kind: "message", Role: "agent", MessageID: t.ID + "-pending", ContextID: t.SessionID, TaskID: t.ID,
				Parts: []Part{
					{Kind: "text", Text: fmt.Sprintf("The turn waits for %d action(s), first: %s of %s (call %s). Resolve each with message/send in contextId %s "+
						`whose parts are data parts {"type":"approval","call_id":..,"approved":true|false} or {"type":"tool_result","call_id":..,"output":".."} `+
						"(or POST /v1/sessions/%s/turns).", len(t.RequiredActions), ra.Type, ra.Tool, ra.CallID, t.SessionID, t.SessionID)},
					{Kind: "data", Data: mustJSON(map[string]any{"required_actions": t.RequiredActions})},
				}}
		}
	case forge.TurnErrored:
		out.Status.State = "failed"
		msg := "the turn failed"
		if t.Error != nil {
			msg = t.Error.Code + ": " + t.Error.Message
		}
		out.Status.Message = &Message{Kind: "message", Role: "agent", MessageID: t.ID + "-error", ContextID: t.SessionID, TaskID: t.ID, Parts: []Part{{Kind: "text", Text: msg}}}
	case forge.TurnCancelled:
		out.Status.State = "canceled"
	}
	if text != "" {
		out.Artifacts = []Artifact{{ArtifactID: t.ID + "-output", Parts: []Part{{Kind: "text", Text: text}}}}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
