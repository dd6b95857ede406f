// Package providertest is the conformance suite every model provider
// passes (in the manner of storetest): one set of wire-level cases, each a
// function run for every provider against its loopback fake speaking its
// real wire format, so that a behaviour (a cut stream, a Retry-After, a
// cancelled call, a history with tool calls) is written once and checked
// everywhere.
//
//	func TestConformance(t *testing.T) { providertest.Run(t, providertest.Anthropic()) }
//
// A Provider is a small adapter (providers.go): how to start its fake, how
// to build its model against it, and the cases it cannot run, each with the
// reason (a case is never skipped silently). The fakes take replies
// written in no API's terms (fakeapi.Reply: Text, Reasoning, Calls,
// Failure, CutAt, HangAt, FailAt, ...) and give back the requests they
// received in no API's terms (fakeapi.Request).
//
// Run runs the cases of the provider's own code; RunWrapped the cases of
// the registry's reliability wrapper around it (retries, backoff,
// timeouts, cost), which package provider's tests run for every provider.
// Provider-specific behaviour (exact request bodies, captured streams,
// error bodies of one API) stays in each provider's own tests.
package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// Provider is what the suite needs to know of a provider.
type Provider struct {
	// Name names the provider's subtests (openai-chat).
	Name string
	// Kind is the provider's kind in forge.yaml; RunWrapped builds it
	// through provider.Build.
	Kind string
	// ModelID is the model the cases call.
	ModelID string
	// Env is what the provider's SDK would read from the environment on
	// its own, set to misleading values by the case that checks it does
	// not: every value must be unique enough not to appear in a request by
	// chance.
	Env map[string]string
	// Start starts a fake for one case; t.Cleanup closes it.
	Start func(t testing.TB) Fake
	// Model returns the provider's model for c.
	Model func(c Config) forge.Model
	// ToolResultFilesAsUser is set for an API whose tool results hold
	// text alone (Chat Completions): the files of a tool result follow in
	// a user message.
	ToolResultFilesAsUser bool
	// Unsupported names the groups ("Request") and cases
	// ("Request/Temperature") the provider cannot run, each with the
	// reason; they are skipped with it. A name the suite does not know
	// fails the run.
	Unsupported map[string]string
}

// Config is how a case wants the model built.
type Config struct {
	Name    string // the provider name in errors ("" the provider's default)
	APIKey  string
	BaseURL string
	Model   string
	// HTTPClient is nil for the provider's default client.
	HTTPClient *http.Client
	// Fake is the case's fake (nil when the case has none).
	Fake Fake
}

// Fake is what the suite needs of a provider's loopback fake.
type Fake interface {
	// URL is the base URL to configure the provider with.
	URL() string
	// SetAPIKey makes the fake refuse requests without this key.
	SetAPIKey(key string)
	// Respond queues replies, served one per request in order.
	Respond(replies ...fakeapi.Reply)
	// SetDefaultReply sets the reply served when the queue is empty.
	SetDefaultReply(r fakeapi.Reply)
	// Pending is the number of queued replies not yet served.
	Pending() int
	// RecordRequests turns the recording of requests on or off.
	RecordRequests(on bool)
	// Received returns the requests received (and recorded).
	Received() []fakeapi.Request
	// InFlight is the number of requests being answered.
	InFlight() int
	// Connections is the number of connections accepted; SetGate makes
	// every request call gate before it is answered (nil: no gate).
	Pool
}

// Run runs the suite's cases of p's own code (every group but the
// registry's).
func Run(t *testing.T, p Provider) {
	run(t, p, groups, wrappedGroups)
}

// RunWrapped runs the cases of the registry's reliability wrapper around
// p: p built by provider.Build from a forge.yaml of kind p.Kind.
func RunWrapped(t *testing.T, p Provider) {
	run(t, p, wrappedGroups, groups)
}

// group is a named list of cases.
type group struct {
	name  string
	tests []test
	// serial groups set the environment: they and their cases do not run
	// in parallel (t.Setenv).
	serial bool
}

// test is one case: run gets a fixture with the provider's fake started.
type test struct {
	name string
	run  func(f *fixture)
}

func run(t *testing.T, p Provider, gs, others []group) {
	known := map[string]bool{}
	for _, g := range slices.Concat(gs, others) {
		known[g.name] = true
		for _, tc := range g.tests {
			known[g.name+"/"+tc.name] = true
		}
	}
	for name := range p.Unsupported {
		if !known[name] {
			t.Fatalf("providertest: %s declares unknown case %q unsupported", p.Name, name)
		}
	}
	for _, g := range gs {
		t.Run(g.name, func(t *testing.T) {
			if !g.serial {
				t.Parallel()
			}
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					if !g.serial {
						t.Parallel()
					}
					for _, name := range []string{g.name, g.name + "/" + tc.name} {
						if why, ok := p.Unsupported[name]; ok {
							t.Skipf("unsupported by %s: %s", p.Name, why)
						}
					}
					tc.run(newFixture(t, p))
				})
			}
		})
	}
}

// groups are the cases of a provider's own code.
var groups = []group{
	{name: "Stream", tests: streamTests},
	{name: "Errors", tests: errorTests},
	{name: "MidStream", tests: midStreamTests},
	{name: "Cancel", tests: cancelTests},
	{name: "Request", tests: requestTests},
	{name: "Connection", tests: connectionTests},
	{name: "Environment", tests: environmentTests, serial: true},
}

// wrappedGroups are the cases of the registry's wrapper around it.
var wrappedGroups = []group{
	{name: "Reliability", tests: reliabilityTests},
}

// fixture is one case's provider and fake.
type fixture struct {
	*testing.T
	p    Provider
	fake Fake
}

func newFixture(t *testing.T, p Provider) *fixture {
	return &fixture{T: t, p: p, fake: p.Start(t)}
}

// sub runs fn as a subtest with a fake of its own.
func (f *fixture) sub(name string, fn func(f *fixture)) {
	f.Helper()
	f.Run(name, func(t *testing.T) { fn(newFixture(t, f.p)) })
}

// config is the default model configuration: the fake's URL, the
// provider's model.
func (f *fixture) config() Config {
	return Config{BaseURL: f.fake.URL(), Model: f.p.ModelID, Fake: f.fake}
}

// model is the provider's model against the fake.
func (f *fixture) model() forge.Model { return f.p.Model(f.config()) }

// respond queues replies on the fake.
func (f *fixture) respond(replies ...fakeapi.Reply) { f.fake.Respond(replies...) }

// hello is a one-message request for the model's own id.
func hello() *forge.ModelRequest {
	return &forge.ModelRequest{Messages: []forge.ModelMessage{user("Hello")}}
}

func user(text ...string) forge.ModelMessage {
	m := forge.ModelMessage{Role: forge.RoleUser}
	for _, s := range text {
		m.Parts = append(m.Parts, forge.ModelPart{Type: forge.ModelPartText, Text: s})
	}
	return m
}

func assistant(parts ...forge.ModelPart) forge.ModelMessage {
	return forge.ModelMessage{Role: forge.RoleAssistant, Parts: parts}
}

func toolResults(parts ...forge.ModelPart) forge.ModelMessage {
	return forge.ModelMessage{Role: forge.RoleTool, Parts: parts}
}

func textPart(s string) forge.ModelPart { return forge.ModelPart{Type: forge.ModelPartText, Text: s} }

func callPart(id, name, args string) forge.ModelPart {
	p := forge.ModelPart{Type: forge.ModelPartToolCall, CallID: id, Name: name}
	if args != "" {
		p.Arguments = json.RawMessage(args)
	}
	return p
}

func resultPart(id, output string) forge.ModelPart {
	return forge.ModelPart{Type: forge.ModelPartToolResult, CallID: id, Output: output}
}

// usage is a Usage of input and output tokens.
func usage(in, out int) fakeapi.Usage { return fakeapi.Usage{Input: in, Output: out} }

// reply is a stream's events, rendered and as they came, and its error.
type reply struct {
	got    []string
	events []forge.ModelEvent
	err    error
	ended  time.Time // when the stream returned (tracked calls)
}

// deltas are the text and reasoning deltas of the reply.
func (r reply) deltas() []string {
	var out []string
	for _, ev := range r.events {
		if ev.Type == forge.TextDelta || ev.Type == forge.ReasoningDelta {
			out = append(out, ev.Delta)
		}
	}
	return out
}

// finish is the reply's finish, nil when there was none.
func (r reply) finish() *forge.Finish {
	for _, ev := range r.events {
		if ev.Type == forge.FinishEvent {
			return ev.Finish
		}
	}
	return nil
}

// stream streams req from m to its end.
func stream(ctx context.Context, m forge.Model, req *forge.ModelRequest) reply {
	var r reply
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			r.err = err
			return r
		}
		r.got = append(r.got, Render(ev))
		r.events = append(r.events, ev)
	}
	return r
}

// call streams req from the fake's model.
func (f *fixture) call(req *forge.ModelRequest) reply {
	return stream(f.Context(), f.model(), req)
}

// events fails unless r ended without an error with the events want.
func (f *fixture) events(r reply, want ...string) {
	f.Helper()
	if r.err != nil {
		f.Fatalf("stream error %v after %q", r.err, r.got)
	}
	f.same(r.got, want, "events")
}

// same fails unless got and want are deeply equal.
func (f *fixture) same(got, want any, what string) {
	f.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	if _, ok := got.([]string); ok {
		f.Errorf("%s:\n got %q\nwant %q", what, got, want)
	} else {
		f.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// modelError is err as a *forge.ModelError, failing the test otherwise.
func (f *fixture) modelError(err error) *forge.ModelError {
	f.Helper()
	return ModelError(f.T, err)
}

// received is what the fake received, failing unless it is n requests.
func (f *fixture) received(n int) []fakeapi.Request {
	f.Helper()
	got := f.fake.Received()
	if len(got) != n {
		f.Fatalf("the fake received %d requests, want %d", len(got), n)
	}
	return got
}

// sameJSON compares got and want as JSON values.
func (f *fixture) sameJSON(got, want any, what string) {
	f.Helper()
	g, w := canon(f, got), canon(f, want)
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.MarshalIndent(g, "", "  ")
		wb, _ := json.MarshalIndent(w, "", "  ")
		f.Errorf("%s differs\n got: %s\nwant: %s", what, gb, wb)
	}
}

func canon(f *fixture, v any) any {
	f.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		f.Fatalf("marshal %T: %v", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		f.Fatalf("unmarshal %T: %v", v, err)
	}
	return out
}

// within fails when d is more than limit: the call did not end at once.
func (f *fixture) within(d, limit time.Duration, what string) {
	f.Helper()
	if d > limit {
		f.Errorf("%s took %v (at most %v)", what, d, limit)
	}
}

// contains fails unless s contains each of subs.
func (f *fixture) contains(s string, subs ...string) {
	f.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			f.Errorf("%q does not contain %q", s, sub)
		}
	}
}

// hasString tells whether raw JSON holds the string s as a value.
func hasString(raw json.RawMessage, s string) bool {
	q, _ := json.Marshal(s)
	return s != "" && bytes.Contains(raw, q)
}
