package engine_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

var update = flag.Bool("update", false, "rewrite engine/testdata/*.golden from the current output")

// Golden event sequences of representative turns (engine/testdata): the
// envelope and data of every event, ids and times normalised. A change to
// what the engine emits shows up here; run `go test ./engine -run Golden
// -update` to accept it, and review the diff.
func TestGoldenEventSequences(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(t *testing.T) []forge.Event
	}{
		{"text", goldenText},
		{"tool_round_trip", goldenToolRoundTrip},
		{"approval_pause", goldenApproval},
		{"cancel", goldenCancel},
		{"recovery", goldenRecovery},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := normalize(tc.run(t))
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("events differ from %s (run with -update to accept them):\n%s", path, lineDiff(string(want), got))
			}
		})
	}
}

// stream runs a turn as a streamed one and returns its events, deltas
// included; during, when set, runs once the first delta arrived.
func goldenStream(t *testing.T, h *harness, sid string, req engine.TurnRequest, during func()) []forge.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	_, stream, err := h.eng.StreamTurn(ctx, forge.DefaultTenant, sid, req)
	if err != nil {
		t.Fatal(err)
	}
	var out []forge.Event
	var duringDone chan struct{}
	for ev, err := range stream {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		if ev.Type == forge.EventModelDelta && during != nil {
			duringDone = make(chan struct{})
			go func(run func(), done chan struct{}) {
				defer close(done)
				run()
			}(during, duringDone)
			during = nil
		}
	}
	if duringDone != nil {
		<-duringDone // it uses the store the harness closes
	}
	return out
}

func goldenText(t *testing.T) []forge.Event {
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{reasoning: "think", deltas: []string{"Hel", "lo"}, usage: forge.Usage{InputTokens: 10, OutputTokens: 2}})
	return goldenStream(t, h, s.ID, msg("hi"), nil)
}

func goldenToolRoundTrip(t *testing.T) []forge.Event {
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) { a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}} })
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"pong"}`)}, usage: forge.Usage{InputTokens: 20, OutputTokens: 5}},
		reply{deltas: []string{"got pong"}, usage: forge.Usage{InputTokens: 30, OutputTokens: 2}})
	return goldenStream(t, h, s.ID, msg("ping"), nil)
}

func goldenApproval(t *testing.T) []forge.Event {
	h := newHarness(t)
	h.agent("a", func(a *forge.Agent) {
		a.Tools = []forge.ToolSpec{{Name: "echo", BuiltIn: true}}
		a.Approval = map[string]string{"echo": forge.PolicyAsk}
	})
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("echo", `{"text":"x"}`)}}, reply{deltas: []string{"done"}})
	paused := goldenStream(t, h, s.ID, msg("go"), nil)
	var callID string
	for _, ev := range paused {
		if ev.Type == forge.EventTurnDone {
			callID = turnOf(t, ev).RequiredActions[0].CallID
		}
	}
	resumed := goldenStream(t, h, s.ID, engine.TurnRequest{Input: []forge.Input{approve(callID, true, "")}}, nil)
	return append(paused, resumed...)
}

func goldenCancel(t *testing.T) []forge.Event {
	h := newHarness(t)
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"partial"}, block: make(chan struct{})})
	return goldenStream(t, h, s.ID, msg("go"), func() {
		if _, err := h.eng.Cancel(h.ctx, forge.DefaultTenant, s.ID, "stop"); err != nil {
			t.Error(err)
		}
	})
}

// goldenRecovery: the stored log of a session whose process died mid-turn,
// after the next process recovered it.
func goldenRecovery(t *testing.T) []forge.Event {
	h := newHarness(t, func(c *engine.Config) { c.CheckpointInterval = 10 * time.Millisecond })
	h.agent("a", nil)
	s := h.session("a")
	h.model.push(reply{deltas: []string{"partial"}, block: make(chan struct{})})
	turn, err := h.eng.StartTurn(h.ctx, forge.DefaultTenant, s.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	waitForEvent(t, h, s.ID, forge.EventModelDelta)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		msgs, _ := h.store.TurnMessages(h.ctx, forge.DefaultTenant, turn.ID)
		if len(msgs) > 1 && len(msgs[1].Parts) > 1 && msgs[1].Parts[1].Text == "partial" {
			break // checkpointed
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint")
		}
	}
	copyDB(t, h.path)
	cancelRunning(t, h, s.ID)
	h2 := &harness{t: t, path: h.path + ".copy", model: &testModel{}, ctx: h.ctx}
	h2.open()
	defer h2.close()
	return h2.events(s.ID, 0)
}

func turnOf(t *testing.T, ev forge.Event) forge.Turn {
	t.Helper()
	var turn forge.Turn
	if err := json.Unmarshal(ev.Data, &turn); err != nil {
		t.Fatal(err)
	}
	return turn
}

var (
	idPattern   = regexp.MustCompile(`\b(ag|ses|turn|thr|msg|prt|call|par)_[0-9A-Z]{26}\b`)
	timePattern = regexp.MustCompile(`"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)"`)
)

// normalize renders events one a line: seq, type, envelope ids, data; ids
// become prefix_N in order of appearance and times "<time>".
func normalize(evs []forge.Event) string {
	ids := map[string]string{}
	count := map[string]int{}
	norm := func(s string) string {
		s = idPattern.ReplaceAllStringFunc(s, func(id string) string {
			if n, ok := ids[id]; ok {
				return n
			}
			prefix, _, _ := strings.Cut(id, "_")
			count[prefix]++
			ids[id] = fmt.Sprintf("%s_%d", prefix, count[prefix])
			return ids[id]
		})
		return timePattern.ReplaceAllString(s, `"<time>"`)
	}
	opt := func(p *string) string {
		if p == nil {
			return "-"
		}
		return *p
	}
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d %s id=%s turn=%s thread=%s %s\n", ev.Seq, ev.Type,
			norm(ev.ID), norm(opt(ev.TurnID)), norm(opt(ev.ThreadID)), norm(string(ev.Data)))
	}
	return b.String()
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 8; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
