package providertest

// Helpers for the provider-specific tests that stay in each provider's
// package: one way to render events, replay captured streams, compare
// bodies and record backoffs.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// marks and deltas render the events without a payload of their own.
var (
	marks  = map[forge.ModelEventType]string{forge.TextStart: "text+", forge.TextEnd: "text-", forge.ReasoningStart: "reason+", forge.ReasoningEnd: "reason-"}
	deltas = map[forge.ModelEventType]string{forge.TextDelta: "text:", forge.ReasoningDelta: "reason:"}
)

// Render writes an event compactly: "text+", "text:Hel", "text-",
// "reason+", "reason:...", "reason-", "call:ID NAME ARGS",
// "finish:REASON in=N out=N read=N write=N think=N".
func Render(ev forge.ModelEvent) string {
	if s, ok := marks[ev.Type]; ok {
		return s
	}
	if s, ok := deltas[ev.Type]; ok {
		return s + ev.Delta
	}
	switch ev.Type {
	case forge.ToolCallEvent:
		return "call:" + ev.ToolCall.ID + " " + ev.ToolCall.Name + " " + string(ev.ToolCall.Arguments)
	case forge.FinishEvent:
		u := ev.Finish.Usage
		return "finish:" + ev.Finish.Reason + " in=" + itoa(u.InputTokens) + " out=" + itoa(u.OutputTokens) +
			" read=" + itoa(u.CacheReadTokens) + " write=" + itoa(u.CacheWriteTokens) + " think=" + itoa(u.ReasoningTokens)
	}
	return "unknown(" + itoa(int64(ev.Type)) + ")"
}

// RenderState is Render followed by the event's provider state, if any:
// `reason- {"signature":"..."}`.
func RenderState(ev forge.ModelEvent) string {
	if len(ev.Provider) > 0 {
		return Render(ev) + " " + string(ev.Provider)
	}
	return Render(ev)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Collect streams req from m and renders its events (RenderState) up to
// the end or the error.
func Collect(ctx context.Context, m forge.Model, req *forge.ModelRequest) ([]string, error) {
	var out []string
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return out, err
		}
		out = append(out, RenderState(ev))
	}
	return out, nil
}

// ModelError is err as a *forge.ModelError, failing t otherwise.
func ModelError(t testing.TB, err error) *forge.ModelError {
	t.Helper()
	var me *forge.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T) is not a *forge.ModelError", err, err)
	}
	return me
}

// SameJSON fails t unless the JSON document got equals want by value.
func SameJSON(t testing.TB, what string, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.MarshalIndent(g, "", "  ")
		wb, _ := json.MarshalIndent(w, "", "  ")
		t.Errorf("%s:\n%s\nwant:\n%s", what, gb, wb)
	}
}

// Fixture is a stream captured from a real server (testdata/File) and
// what a provider must make of it: the events (RenderState) and, when Err
// is set, the ModelError that ends them: its Message a substring, its
// Provider, StatusCode, Retryable, RetryAfter and ContextOverflow exact.
type Fixture struct {
	File string
	Want []string
	Err  *forge.ModelError
}

// Fixtures replays each fixture through the model play returns after
// queueing the captured stream on a fake of its own.
func Fixtures(t *testing.T, fixtures []Fixture, play func(t *testing.T, sse []byte) forge.Model) {
	for _, tt := range fixtures {
		t.Run(strings.TrimSuffix(tt.File, ".sse"), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(filepath.Join("testdata", tt.File))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Collect(t.Context(), play(t, data), hello())
			if w := tt.Err; w != nil {
				me := ModelError(t, err)
				if !strings.Contains(me.Message, w.Message) || me.Provider != w.Provider || me.StatusCode != w.StatusCode ||
					me.Retryable != w.Retryable || me.ContextOverflow != w.ContextOverflow || me.RetryAfter != w.RetryAfter {
					t.Errorf("error = %+v, want %+v", *me, *w)
				}
			} else if err != nil {
				t.Fatalf("stream error: %v", err)
			}
			if !slices.Equal(got, tt.Want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.Want)
			}
		})
	}
}

// Tools are tools whose schemas the APIs would refuse as they are: an
// empty one, none, one without a type.
func Tools() []forge.ToolDef {
	return []forge.ToolDef{
		{Name: "get_weather", Description: "Weather of a city", InputSchema: json.RawMessage(
			`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`)},
		{Name: "now", InputSchema: json.RawMessage(`{}`)},
		{Name: "ping"},
		{Name: "untyped", InputSchema: json.RawMessage(`{"properties":{"a":{"type":"integer"}},"$defs":{"x":{}}}`)},
	}
}

// Sleeps records a backoff's waits instead of waiting (the Sleep of
// provider.Options and provider.WrapOptions).
type Sleeps struct {
	mu sync.Mutex // guards d
	d  []time.Duration
}

// Sleep records d and returns ctx's error.
func (s *Sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

// Waits returns the waits recorded.
func (s *Sleeps) Waits() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.d)
}

// TinyPNG is a 2x2 PNG: an image small enough to compare byte for byte.
func TinyPNG() []byte {
	img := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.NRGBA{R: 255, A: 255})
	img.Set(1, 1, color.NRGBA{B: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err) // an in-memory image always encodes
	}
	return b.Bytes()
}
