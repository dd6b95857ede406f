package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
)

// instantModel is a minimal Chat Completions server for load runs: it
// answers every streamed request with the reply "ok", written as the same
// SSE bytes (and flushes) as openaitest's default reply, but reads of the
// request only the two fields that reply depends on. openaitest decodes
// and validates the whole request, which costs 0.2-0.3 ms for the hundred
// messages a session's later turns send: that would count against the
// turn. TestInstantModelBytes checks the two write the same stream.
type instantModel struct {
	srv     *httptest.Server
	seq     atomic.Int64
	created int64

	mu     sync.Mutex // guards the following
	record bool
	bodies [][]byte
}

func startInstantModel() *instantModel {
	m := &instantModel{created: time.Now().Unix(), record: true}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	return m
}

// URL is the base URL, ending in /v1.
func (m *instantModel) URL() string { return m.srv.URL + "/v1" }

func (m *instantModel) Close() {
	m.srv.CloseClientConnections()
	m.srv.Close()
}

// RecordRequests turns the recording of request bodies on (the default)
// or off.
func (m *instantModel) RecordRequests(on bool) {
	m.mu.Lock()
	m.record = on
	m.mu.Unlock()
}

// takeBodies returns the request bodies recorded since the last call.
func (m *instantModel) takeBodies() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bodies
	m.bodies = nil
	return b
}

func (m *instantModel) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"instant model: only POST /v1/chat/completions","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		http.Error(w, `{"error":{"message":"instant model: cannot read the body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	fields := gjson.GetManyBytes(body, "model", "stream", "stream_options.include_usage")
	model, usage := fields[0].String(), fields[2].Bool()
	if model == "" || !fields[1].Bool() {
		http.Error(w, `{"error":{"message":"instant model: a streamed request with a model is required","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	if m.record {
		m.bodies = append(m.bodies, body)
	}
	m.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Request-Id", "req_"+strconv.FormatInt(m.seq.Add(1), 10))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()

	head := fmt.Appendf(nil, `data: {"id":"chatcmpl-OTEST%019d","object":"chat.completion.chunk","created":%d,"model":`, m.seq.Add(1), m.created)
	head = appendJSONString(head, model)
	head = append(head, `,"system_fingerprint":"fp_openaitest","choices":[`...)
	tail := "}\n\n"
	if usage {
		tail = `,"usage":null}` + "\n\n"
	}
	ev := make([]byte, 0, 512)
	write := func(choice string) bool {
		ev = append(append(append(ev[:0], head...), choice...), tail...)
		if _, err := w.Write(ev); err != nil {
			return false
		}
		rc.Flush()
		return true
	}
	if !write(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`) {
		return
	}
	replyBytes := 2 // "ok"
	if spec, ok := parsePaced(model); ok {
		// The content deltas, the first at once and each next one spec.pace
		// after the one before it (on a schedule, so that sleeping late
		// once does not slow the whole reply).
		replyBytes = 0
		start := time.Now()
		var choice []byte
		for i := range spec.deltas {
			if i > 0 && spec.pace > 0 {
				if d := time.Until(start.Add(time.Duration(i) * spec.pace)); d > 0 {
					select {
					case <-time.After(d):
					case <-r.Context().Done():
						return
					}
				}
			}
			piece := pacedPiece(i)
			replyBytes += len(piece)
			choice = append(appendJSONString(append(choice[:0], `{"index":0,"delta":{"content":`...), piece),
				`},"logprobs":null,"finish_reason":null}]`...)
			if !write(string(choice)) {
				return
			}
		}
	} else if !write(`{"index":0,"delta":{"content":"ok"},"logprobs":null,"finish_reason":null}]`) {
		return
	}
	if !write(`{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]`) {
		return
	}
	if usage {
		// openaitest's estimate: a token per 4 bytes of the request, and of
		// the reply.
		in, out := max(1, len(body)/4), max(1, replyBytes/4)
		ev = append(ev[:0], head...)
		ev = fmt.Appendf(ev, `],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
			`"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,`+
			`"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}`+"\n\n", in, out, in+out)
		if _, err := w.Write(ev); err != nil {
			return
		}
		rc.Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
	rc.Flush()
}

// appendJSONString appends s as a JSON string, without HTML escapes (as
// OpenAI, and openaitest, write it).
func appendJSONString(b []byte, s string) []byte {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, strings.TrimSuffix(sb.String(), "\n")...)
}

// A paced reply: the instant model answers a request for the model
// "paced-<N>x<D>" (paced-500x2ms, say) with N content deltas, one every D
// (paced-500x0s: all at once), instead of "ok". Real models pause between
// tokens; the model's name carries the pacing so that agents with
// different pacings share one fake, and concurrent streams need no shared
// setting.
type pacedSpec struct {
	deltas int
	pace   time.Duration
}

// pacedModel is the model name of a reply of n deltas, pace apart.
func pacedModel(n int, pace time.Duration) string {
	return fmt.Sprintf("paced-%dx%s", n, pace)
}

// parsePaced reads a pacedModel name: at most a million deltas, at most
// 10 s apart.
func parsePaced(model string) (pacedSpec, bool) {
	rest, ok := strings.CutPrefix(model, "paced-")
	if !ok {
		return pacedSpec{}, false
	}
	n, d, ok := strings.Cut(rest, "x")
	if !ok {
		return pacedSpec{}, false
	}
	deltas, err1 := strconv.Atoi(n)
	pace, err2 := time.ParseDuration(d)
	if err1 != nil || err2 != nil || deltas < 1 || deltas > 1_000_000 || pace < 0 || pace > 10*time.Second {
		return pacedSpec{}, false
	}
	return pacedSpec{deltas: deltas, pace: pace}, true
}

// pacedWords are the deltas of a paced reply, in turn: a word each, about
// a token.
var pacedWords = [...]string{" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", "."}

// pacedPiece is delta i of a paced reply.
func pacedPiece(i int) string { return pacedWords[i%len(pacedWords)] }
