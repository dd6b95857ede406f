// Package storetest is the conformance suite every forge.Store passes (in
// the manner of River's riverdrivertest): one set of table tests over the
// documented semantics of each method, run by each driver's own tests.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{Open: ..., Reopen: ...})
//	}
//
// Conventions the suite fixes beyond store.go's comments: agents list by
// name, sessions and turns oldest first; list cursors are opaque and the
// next cursor is "" on the last page; session-scoped reads of a deleted or
// foreign session are ErrNotFound; stored rows compare equal as JSON (so a
// store may reformat JSON columns) and times round-trip at millisecond
// precision.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// Harness opens stores for the suite.
type Harness struct {
	// Open returns a fresh, empty store. The harness closes it when t ends.
	// The suite's cases run in parallel, each on a store of its own.
	Open func(t *testing.T) forge.Store
	// Reopen closes s and opens the same database again (durability tests).
	// Optional: those tests are skipped without it. The cleanup Open
	// registered may close s a second time, so Close must tolerate that.
	Reopen func(t *testing.T, s forge.Store) forge.Store
	// Serial runs the cases one at a time. By default they run in
	// parallel (t.Parallel), so Open must be safe to call concurrently and
	// give each case its own database.
	Serial bool
}

// Run runs the whole suite against the stores h opens.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is required")
	}
	groups := []struct {
		name  string
		tests []test
	}{
		{"Agents", agentTests},
		{"Sessions", sessionTests},
		{"BeginTurn", beginTurnTests},
		{"Commit", commitTests},
		{"Turns", turnTests},
		{"Messages", messageTests},
		{"LongBranches", longBranchTests},
		{"Compaction", compactionTests},
		{"Events", eventTests},
		{"EventLog", eventLogTests},
		{"Usage", usageTests},
		{"Idempotency", idempotencyTests},
		{"Tenancy", tenancyTests},
		{"Durability", durabilityTests},
		{"Content", contentTests},
		{"Keys", keyTests},
		{"Files", fileTests},
		{"Webhooks", webhookTests},
		{"Schedules", scheduleTests},
		{"Leases", leaseTests},
		{"Forums", forumTests},
		{"Operations", operationTests},
		{"Failures", failureTests},
		{"Queued", queuedTests},
		{"Overrides", overrideTests},
		{"Retention", retentionTests},
	}
	parallel := func(t *testing.T) {
		if !h.Serial {
			t.Parallel()
		}
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			parallel(t)
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					if tc.reopen && h.Reopen == nil {
						t.Skip("harness has no Reopen")
					}
					// Every test has a store of its own.
					parallel(t)
					f := newFixture(t, h)
					tc.run(f)
				})
			}
		})
	}
}

// test is one case of a group.
type test struct {
	name   string
	reopen bool // needs Harness.Reopen
	run    func(f *fixture)
}

// Tenants used by the suite.
const (
	tenantA = "acme"
	tenantB = "globex"
)

// base is the suite's fixed epoch: every time it writes derives from it.
var base = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// stepClock advances one millisecond per reading, so ids made from it are
// ordered and times are distinct and exact at millisecond precision.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// fixture is one test's store plus deterministic ids and times.
type fixture struct {
	*testing.T
	ctx   context.Context
	s     forge.Store
	h     Harness
	clock *stepClock
	ids   *forge.ULIDGen
}

func newFixture(t *testing.T, h Harness) *fixture {
	clock := &stepClock{t: base}
	return &fixture{T: t, ctx: context.Background(), s: h.Open(t), h: h, clock: clock, ids: forge.NewULIDGen(clock)}
}

func (f *fixture) id(prefix string) string { return f.ids.New(prefix) }
func (f *fixture) now() time.Time          { return f.clock.Now() }

// reopen closes the store and opens the same database again.
func (f *fixture) reopen() {
	f.Helper()
	f.s = f.h.Reopen(f.T, f.s)
}

// ok fails the test now on an unexpected error.
func (f *fixture) ok(err error, what string) {
	f.Helper()
	if err != nil {
		f.Fatalf("%s: unexpected error: %v", what, err)
	}
}

// is fails the test unless err wraps want.
func (f *fixture) is(err, want error, what string) {
	f.Helper()
	if !errors.Is(err, want) {
		f.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// sameJSON compares got and want as JSON values: key order, spacing and
// the formatting of embedded JSON do not matter.
func (f *fixture) sameJSON(got, want any, what string) {
	f.Helper()
	g, w := canon(f, got), canon(f, want)
	if !reflect.DeepEqual(g, w) {
		gb, _ := json.MarshalIndent(g, "", "  ")
		wb, _ := json.MarshalIndent(w, "", "  ")
		f.Fatalf("%s differs\n got: %s\nwant: %s", what, gb, wb)
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

// eq fails unless got == want.
func eq[T comparable](f *fixture, got, want T, what string) {
	f.Helper()
	if got != want {
		f.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func ptr[T any](v T) *T { return &v }

// ---- builders -------------------------------------------------------------

func (f *fixture) newSession(tenant string) *forge.Session {
	f.Helper()
	now := f.now()
	s := &forge.Session{
		ID: f.id(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: "support",
		Title: "order 42", MainThreadID: f.id(forge.PrefixThread), Metadata: json.RawMessage(`{"ticket": 42}`),
		CreatedAt: now, UpdatedAt: now,
	}
	f.ok(f.s.CreateSession(f.ctx, s), "CreateSession")
	return s
}

func (f *fixture) newTurn(ses *forge.Session, prev *string) *forge.Turn {
	return &forge.Turn{
		ID: f.id(forge.PrefixTurn), Tenant: ses.Tenant, SessionID: ses.ID, PreviousTurnID: prev,
		AgentID: "ag_support", AgentVersion: 1, Status: forge.TurnRunning,
		Input:     []forge.Input{{Type: forge.InputMessage, Text: "Where is order 42?"}},
		CreatedAt: f.now(),
	}
}

// message builds a message of turn on thread with one completed text part
// per text.
func (f *fixture) message(t *forge.Turn, thread, role string, texts ...string) *forge.Message {
	m := &forge.Message{
		ID: f.id(forge.PrefixMessage), Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID,
		ThreadID: thread, Role: role, CreatedAt: f.now(), Parts: []*forge.Part{},
	}
	for _, text := range texts {
		m.Parts = append(m.Parts, f.textPart(m, text, forge.StateCompleted))
	}
	return m
}

func (f *fixture) textPart(m *forge.Message, text, state string) *forge.Part {
	now := f.now()
	return &forge.Part{
		ID: f.id(forge.PrefixPart), MessageID: m.ID, SessionID: m.SessionID, TurnID: m.TurnID,
		Type: forge.PartText, Text: text, State: state, CreatedAt: now, UpdatedAt: now,
	}
}

// seqs reserves n seqs in the session and returns them.
func (f *fixture) seqs(ses *forge.Session, n int64) []int64 {
	f.Helper()
	bound, err := f.s.ReserveSeqs(f.ctx, ses.Tenant, ses.ID, n)
	f.ok(err, "ReserveSeqs")
	out := make([]int64, n)
	for i := range out {
		out[i] = bound - n + 1 + int64(i)
	}
	return out
}

func (f *fixture) event(t *forge.Turn, seq int64, typ, id string, data any) forge.Event {
	f.Helper()
	b, err := json.Marshal(data)
	f.ok(err, "marshal event data")
	thread := "thr_main"
	return forge.Event{
		Seq: seq, ID: id, Type: typ, SessionID: t.SessionID, TurnID: ptr(t.ID), ThreadID: &thread,
		CreatedAt: f.now(), Data: b,
	}
}

// started is a turn begun by start, with what it wrote.
type started struct {
	turn   *forge.Turn
	msg    *forge.Message
	events []forge.Event
}

// start begins a turn chained from prev with a user message and its two
// events (turn.created, message.created).
func (f *fixture) start(ses *forge.Session, prev *string, text string) started {
	f.Helper()
	t := f.newTurn(ses, prev)
	m := f.message(t, ses.MainThreadID, forge.RoleUser, text)
	seq := f.seqs(ses, 2)
	evs := []forge.Event{
		f.event(t, seq[0], forge.EventTurnCreated, t.ID, t),
		f.event(t, seq[1], forge.EventMessageCreated, m.ID, m),
	}
	t.LastSeq = seq[1]
	f.ok(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: t, Messages: []*forge.Message{m}, Events: evs}), "BeginTurn")
	return started{turn: t, msg: m, events: evs}
}

// end commits t's terminal write (done, with output) and its turn.done
// event, and returns the event.
func (f *fixture) end(ses *forge.Session, t *forge.Turn) forge.Event {
	f.Helper()
	e, _ := f.endBatch(ses, t)
	return e
}

// endBatch is end, and the terminal batch as Commit left it.
func (f *fixture) endBatch(ses *forge.Session, t *forge.Turn) (forge.Event, *forge.Batch) {
	f.Helper()
	seq := f.seqs(ses, 1)[0]
	t.Status = forge.TurnDone
	t.Output = &forge.TurnOutput{MessageID: "msg_out", Text: "Shipped."}
	t.EndedAt = ptr(f.now())
	t.LastSeq = seq
	e := f.event(t, seq, forge.EventTurnDone, t.ID, t)
	b := &forge.Batch{Tenant: t.Tenant, SessionID: t.SessionID, TurnID: t.ID, Turn: t, Events: []forge.Event{e}}
	f.ok(f.s.Commit(f.ctx, b), "Commit terminal")
	return e, b
}

// ---- readers ----------------------------------------------------------------

func (f *fixture) events(ses *forge.Session, q forge.EventQuery) []forge.Event {
	f.Helper()
	q.SessionID = ses.ID
	evs, err := f.s.ListEvents(f.ctx, ses.Tenant, q)
	f.ok(err, "ListEvents")
	return evs
}

func seqsOf(evs []forge.Event) []int64 {
	out := []int64{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func (f *fixture) branch(ses *forge.Session, tip, thread string, limit int, cursor string) ([]*forge.Message, string) {
	f.Helper()
	ms, next, err := f.s.ListMessages(f.ctx, ses.Tenant, forge.MessageQuery{SessionID: ses.ID, TipTurnID: tip,
		ThreadID: thread, ListOptions: forge.ListOptions{Limit: limit, Cursor: cursor}})
	f.ok(err, "ListMessages")
	return ms, next
}

func msgIDs(ms []*forge.Message) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func idsOf[T any](items []T, id func(T) string) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, id(it))
	}
	return out
}

func sorted(ids ...string) []string {
	out := append([]string{}, ids...)
	sort.Strings(out)
	return out
}

// pages walks a list to its end with the given limit and returns the ids
// of each page, checking that only the last page has an empty cursor.
func pages[T any](f *fixture, limit int, list func(forge.ListOptions) ([]T, string, error), id func(T) string) [][]string {
	f.Helper()
	var out [][]string
	cursor := ""
	for i := 0; ; i++ {
		if i > 100 {
			f.Fatal("pagination does not end")
		}
		items, next, err := list(forge.ListOptions{Limit: limit, Cursor: cursor})
		f.ok(err, "list page")
		if limit > 0 && len(items) > limit {
			f.Fatalf("page has %d items, limit %d", len(items), limit)
		}
		out = append(out, idsOf(items, id))
		if next == "" {
			return out
		}
		if len(items) == 0 {
			f.Fatal("empty page with a next cursor")
		}
		cursor = next
	}
}
