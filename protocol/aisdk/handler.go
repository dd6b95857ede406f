// Package aisdk serves the AI SDK UI message stream protocol (the
// "x-vercel-ai-ui-message-stream: v1" SSE stream that useChat's
// DefaultChatTransport reads) over Forge agents: a chat is a Forge
// session, each request's resent messages are compared with the session's
// branch to decide the turn to run (a chain, a fork, or the resolution of
// open calls), and the turn streams as one assistant UI message. Mounted
// by httpapi under /aisdk/v1/:
//
//	POST /aisdk/v1/agents/{agent}/chat                 send (the transport's api)
//	GET  /aisdk/v1/agents/{agent}/chat/{chat}/stream   resume the running turn (204 when none)
//	POST /aisdk/v1/agents/{agent}/chat/{chat}/stop     cancel it
package aisdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
	"github.com/forge-runtime/forge/internal/sse"
	"github.com/forge-runtime/forge/protocol"
)

// Prefix is where the protocol is served.
const Prefix = "/aisdk/v1/"

// maxBody bounds a chat request: the client resends the whole chat.
const maxBody = 16 << 20

// maxDepth bounds JSON nesting, as the Forge API does.
const maxDepth = 64

// Protocol is the AI SDK UI message stream protocol, for
// httpapi.Config.Protocols.
type Protocol struct{}

// Prefix implements httpapi.Protocol.
func (Protocol) Prefix() string { return Prefix }

// WriteError implements httpapi.Protocol: Forge's error shape (useChat
// shows the body's text as the error).
func (Protocol) WriteError(w http.ResponseWriter, status int, code, message string) {
	writeError(w, status, code, message)
}

// Handler implements httpapi.Protocol.
func (Protocol) Handler(env protocol.Env) http.Handler { return &handler{env: env} }

type handler struct {
	env protocol.Env
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, r.Context().Err()) {
		w.WriteHeader(499)
		return
	}
	status, code, msg := h.env.Classify(err)
	protocol.SetRetryAfter(w, err)
	if status >= 500 {
		h.env.Log.Error("ai sdk chat request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="forge"`)
	}
	writeError(w, status, code, msg)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	seg := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/")), "/"), "/")
	var method string
	var serve func(w http.ResponseWriter, r *http.Request, tenant, agent string, seg []string) error
	switch {
	case len(seg) == 3 && seg[0] == "agents" && seg[2] == "chat":
		method, serve = "POST", h.send
	case len(seg) == 5 && seg[0] == "agents" && seg[2] == "chat" && seg[4] == "stream":
		method, serve = "GET", h.resume
	case len(seg) == 5 && seg[0] == "agents" && seg[2] == "chat" && seg[4] == "stop":
		method, serve = "POST", h.stop
	case len(seg) == 5 && seg[0] == "agents" && seg[2] == "chat" && seg[4] == "messages":
		method, serve = "GET", h.messages
	default:
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method "+r.Method+" is not allowed on "+r.URL.Path)
		return
	}
	tenant, err := h.env.Tenant(r)
	if err == nil {
		if seg[1] == "" || (len(seg) == 5 && (seg[3] == "" || len(seg[3]) > 256)) {
			err = forge.Errorf(forge.ErrInvalid, "the agent name and the chat id must not be empty (a chat id is at most 256 characters)")
		} else {
			err = serve(w, r, tenant, seg[1], seg)
		}
	}
	if err != nil {
		h.fail(w, r, err)
	}
}

// readBody reads a chat request: at most maxBody bytes of valid UTF-8
// JSON nested at most maxDepth deep. Unknown fields (an app's own body)
// are ignored.
func readBody(w http.ResponseWriter, r *http.Request, dst any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return forge.Errorf(forge.ErrTooLarge, "the chat request exceeds %d bytes", maxBody)
		}
		return forge.Errorf(forge.ErrInvalid, "could not read the request body: %v", err)
	}
	if !utf8.Valid(b) || !validEscapes(b) {
		return forge.Errorf(forge.ErrInvalid, "the request body is not valid UTF-8")
	}
	if depth(b) > maxDepth {
		return forge.Errorf(forge.ErrInvalid, "the request body nests deeper than %d levels", maxDepth)
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return forge.Errorf(forge.ErrInvalid, "invalid chat request: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// validEscapes reports whether every \u escape of a UTF-16 surrogate in
// JSON text b is part of a pair (encoding/json would silently turn a lone
// one into U+FFFD).
func validEscapes(b []byte) bool {
	hex := func(i int) (int, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return int(n), err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		c, ok := hex(i)
		if !ok {
			i++ // another escape: skip its character
			continue
		}
		switch {
		case c >= 0xD800 && c <= 0xDBFF:
			lo, ok := hex(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 11
		case c >= 0xDC00 && c <= 0xDFFF:
			return false
		default:
			i += 5
		}
	}
	return true
}

// depth is the deepest nesting of arrays and objects in JSON text b.
func depth(b []byte) int {
	d, most, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			d++
			most = max(most, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return most
}

// send serves POST /agents/{agent}/chat.
func (h *handler) send(w http.ResponseWriter, r *http.Request, tenant, agent string, _ []string) error {
	var body chatBody
	if err := readBody(w, r, &body); err != nil {
		return err
	}
	if body.ID == "" || len(body.ID) > 256 {
		return forge.Errorf(forge.ErrInvalid, "id (the chat id) is required, at most 256 characters")
	}
	if _, err := h.env.Store.GetAgent(r.Context(), tenant, agent); err != nil {
		if errors.Is(err, forge.ErrNotFound) {
			return forge.Errorf(forge.ErrNotFound, "agent %q not found", agent)
		}
		return err
	}
	ses, err := h.session(r.Context(), tenant, agent, body.ID, true)
	if err != nil {
		return err
	}
	branch, err := h.branch(r.Context(), tenant, ses)
	if err != nil {
		return err
	}
	p, err := diff(&body, branch)
	if err != nil {
		return err
	}
	if len(p.files) > 0 {
		// Checked (type, size) and spooled before anything is stored; the
		// engine stores them with the turn.
		resolved, closeFiles, err := files.Resolve(p.files, tenant, h.env.MaxFileBytes, "messages[-1].parts")
		defer closeFiles()
		if err != nil {
			return err
		}
		p.req.Input[0].Files = resolved
	}
	release, err := h.env.Open(tenant, ses.ID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	turn, events, err := h.env.Runtime.StreamTurn(ctx, tenant, ses.ID, p.req)
	if err != nil {
		return err
	}
	if p.messageID == "" {
		p.messageID = turn.ID
	}
	h.stream(ctx, cancel, w, tenant, ses, p.messageID, nil, turn.ID, events)
	return nil
}

// resume serves GET /agents/{agent}/chat/{chat}/stream: the running
// turn's exchange replayed as one message, then live; 204 when nothing
// runs.
func (h *handler) resume(w http.ResponseWriter, r *http.Request, tenant, agent string, seg []string) error {
	ses, err := h.session(r.Context(), tenant, agent, seg[3], false)
	if errors.Is(err, forge.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if err != nil {
		return err
	}
	if ses.TipTurnID == nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	tip, err := h.env.Store.GetTurn(r.Context(), tenant, ses.ID, *ses.TipTurnID)
	if err != nil {
		return err
	}
	if tip.Ended() {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	branch, err := h.branch(r.Context(), tenant, ses)
	if err != nil {
		return err
	}
	var earlier []*forge.Turn
	messageID := tip.ID
	if n := len(branch); n > 0 && branch[n-1].lastTurn().ID == tip.ID {
		x := branch[n-1]
		earlier, messageID = x.turns[:len(x.turns)-1], x.uiID()
	}
	release, err := h.env.Open(tenant, ses.ID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	h.stream(ctx, cancel, w, tenant, ses, messageID, earlier, tip.ID, protocol.TurnEvents(ctx, h.env.Runtime, tenant, ses.ID, tip.ID))
	return nil
}

// stop serves POST /agents/{agent}/chat/{chat}/stop: it cancels the chat's
// running turn (whose stream then ends with an abort chunk) and answers
// {"stopped": true}, or {"stopped": false} when nothing ran.
func (h *handler) stop(w http.ResponseWriter, r *http.Request, tenant, agent string, seg []string) error {
	ses, err := h.session(r.Context(), tenant, agent, seg[3], false)
	if err != nil {
		return err
	}
	stopped := true
	if _, err := h.env.Runtime.Cancel(protocol.Detach(r), tenant, ses.ID, "stopped through the AI SDK chat"); err != nil {
		if !errors.Is(err, forge.ErrConflict) && !errors.Is(err, forge.ErrTurnEnded) {
			return err
		}
		stopped = false
	}
	b, _ := json.Marshal(map[string]bool{"stopped": stopped})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// stream writes one assistant UI message: the earlier turns of its
// exchange from the store, then the current turn's events (read with ctx,
// which cancel ends).
func (h *handler) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, tenant string, ses *forge.Session, messageID string, earlier []*forge.Turn, turnID string, events iter.Seq2[forge.Event, error]) {
	w.Header().Set("x-vercel-ai-ui-message-stream", "v1")
	w.Header().Set("Forge-Turn-Id", turnID)
	sw := sse.NewWriter(w, sse.WriteWait)
	var encErr error
	enc := &encoder{messageID: messageID, write: func(c chunk) {
		b, err := json.Marshal(c)
		if err != nil {
			encErr = err
			return
		}
		sw.Event(0, "", b)
	}}
	all := func(yield func(forge.Event, error) bool) {
		for _, t := range earlier {
			for ev, err := range protocol.StoredTurnEvents(ctx, h.env.Store, tenant, ses.ID, t.ID) {
				if !yield(ev, err) || err != nil {
					return
				}
			}
		}
		for ev, err := range events {
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
	var proj *protocol.Projector
	turns := 0
	var runs protocol.Runs
	sse.Pump(ctx, cancel, sw, h.env.KeepAlive, all, func(ev forge.Event, err error) bool {
		if err != nil || runs.Starts(ev) {
			sw.Urgent()
		}
		if err == nil && ev.Type == forge.EventTurnCreated {
			proj = protocol.NewProjector(ses.MainThreadID)
			enc.last = turns == len(earlier)
			turns++
		}
		if err == nil && proj != nil {
			err = proj.Apply(ev, enc.step)
		}
		if err == nil {
			err = encErr
		}
		if err != nil {
			_, _, msg := h.env.Classify(err)
			h.env.Log.Warn("chat stream ended by an error", "turn", turnID, "err", err)
			b, _ := json.Marshal(chunk{Type: "error", ErrorText: msg})
			sw.Event(0, "", b)
			sw.Event(0, "", []byte("[DONE]"))
			return true
		}
		if enc.last && proj != nil && proj.Done() {
			sw.Event(0, "", []byte("[DONE]"))
			return true
		}
		return false
	}, nil)
}
