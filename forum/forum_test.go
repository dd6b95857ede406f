package forum_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/eventlog"
	"github.com/forge-runtime/forge/forum"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
)

const tenant = forge.DefaultTenant

// node is one process's forum stack over a SQLite file: store, engine
// (scripted echo model) and forum service.
type node struct {
	st     *sqlite.Store
	eng    *engine.Engine
	forums *forum.Service
}

func openNode(t testing.TB, db string, onCopy func(string)) *node {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("FORUM_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ids := forge.NewULIDGen(nil) // one generator: ids of turns and copies compare by time
	eng := engine.New(engine.Config{Store: st, Models: models, Bus: bus.New(0, 0), Logger: log, IDs: ids, Kinds: forum.Kinds()})
	fs := forum.New(forum.Config{Store: st, Engine: eng, Models: models, Logger: log, IDs: ids, OnCopy: onCopy, Sweep: 100 * time.Millisecond})
	if err := eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fs.Open(ctx); err != nil {
		t.Fatal(err)
	}
	return &node{st: st, eng: eng, forums: fs}
}

func (n *node) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = n.forums.Close(ctx)
	_ = n.eng.Close(ctx)
	_ = n.st.Close(ctx)
}

// TestRandomInterleavings runs random joins, leaves, posts, compactions
// (small context windows), replies and restarts over two forums, then
// checks the invariants: no monologue content in any forum read, every
// copy carries its source once, every reply goes to the forum it came
// from, nothing is answered twice. FORUM_SEED replays a run.
func TestRandomInterleavings(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FORUM_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	runs := 3
	if testing.Short() {
		runs = 1
	}
	for i := range runs {
		s := seed + uint64(i)
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			t.Logf("seed %d (replay with FORUM_SEED=%d)", s, s)
			interleave(t, s)
		})
	}
}

func interleave(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	db := t.TempDir() + "/forge.db"
	n := openNode(t, db, nil)
	defer func() { n.close() }()
	window := int64(600)
	threshold := 0.5
	for _, name := range []string{"ann", "bob", "cat"} {
		if err := n.st.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: name, Model: "scripted/echo",
			Compaction: forge.Compaction{ContextWindow: &window, Threshold: &threshold}}); err != nil {
			t.Fatal(err)
		}
	}
	var forums []string
	for i := range 2 {
		f, err := n.forums.CreateForum(ctx, tenant, fmt.Sprint("room ", i), json.RawMessage(`{}`), forge.ForumGuards{MaxAgentStreak: 4, PairWindow: forge.PairWindow{Max: 3, Seconds: 60}})
		if err != nil {
			t.Fatal(err)
		}
		forums = append(forums, f.ID)
		for _, h := range []string{"hal", "ivy"} {
			if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: h}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	agents := []string{"ann", "bob", "cat"}
	triggers := []string{"auto", "mention", "always"}
	for step := range 60 {
		f := forums[rng.IntN(len(forums))]
		switch op := rng.IntN(10); {
		case op < 2: // join an agent (a conflict when it is in already)
			a := agents[rng.IntN(len(agents))]
			_, err := n.forums.Join(ctx, tenant, f, forge.Actor{Type: forge.ActorAgent, Agent: a}, triggers[rng.IntN(3)])
			if err != nil && !isConflict(err) {
				t.Fatalf("step %d join: %v", step, err)
			}
		case op < 3: // leave an active agent stint
			list, _, err := n.st.ListParticipants(ctx, tenant, f, false, forge.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ags []*forge.Participant
			for _, p := range list {
				if p.Actor.Type == forge.ActorAgent {
					ags = append(ags, p)
				}
			}
			if len(ags) > 0 {
				if _, err := n.forums.Leave(ctx, tenant, f, ags[rng.IntN(len(ags))].ID); err != nil {
					t.Fatalf("step %d leave: %v", step, err)
				}
			}
		case op < 4: // restart the process
			n.close()
			n = openNode(t, db, nil)
		default: // post, sometimes mentioning agents
			text := fmt.Sprintf("step %d %s", step, strings.Repeat("talk ", rng.IntN(60)))
			if rng.IntN(2) == 0 {
				text += " @" + agents[rng.IntN(len(agents))]
			}
			if _, err := n.forums.Post(ctx, tenant, f, []string{"hal", "ivy"}[rng.IntN(2)], text, nil, nil); err != nil {
				t.Fatalf("step %d post: %v", step, err)
			}
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
	}
	quiesce(t, n, forums)
	check(t, n, forums)
}

func isConflict(err error) bool { return forge.ErrorCode(err) == "conflict" }

// quiesce waits until no monologue turn runs and the forums stop growing.
func quiesce(t *testing.T, n *node, forums []string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	// Quiet means no running turn and no new message over several looks
	// 300 ms apart: between a reply and the turn it triggers there is a
	// moment with neither, longer on a loaded machine.
	last, quiet := -1, 0
	for time.Now().Before(deadline) {
		running, err := n.st.RunningTurns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, f := range forums {
			msgs, _, err := n.st.ListLoose(ctx, tenant, f, forge.ListOptions{Limit: 10000})
			if err != nil {
				t.Fatal(err)
			}
			total += len(msgs)
		}
		if len(running) == 0 && total == last {
			if quiet++; quiet >= 4 {
				return
			}
		} else {
			quiet = 0
		}
		last = total
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatal("the forums did not settle in 60 s")
}

func check(t *testing.T, n *node, forums []string) {
	t.Helper()
	ctx := context.Background()
	replies, swaps := 0, 0
	for _, f := range forums {
		msgs, _, err := n.forums.Messages(ctx, tenant, f, forge.ListOptions{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]*forge.ForumMessage{}
		for _, m := range msgs {
			byID[m.ID] = m
		}
		answered := map[string]bool{} // stint + reply_to
		for _, m := range msgs {
			switch m.Kind {
			case forge.ForumKindMessage, forge.ForumKindNotice:
			case forge.ForumKindReply:
				replies++
				if m.ReplyTo == nil || byID[*m.ReplyTo] == nil {
					t.Fatalf("reply %s answers %v, not a message of its forum %s", m.ID, m.ReplyTo, f)
				}
				key := m.Author.ParticipantID + " " + *m.ReplyTo
				if answered[key] {
					p, _ := n.st.GetParticipant(ctx, tenant, f, m.Author.ParticipantID)
					for _, mono := range monologues(t, n, f, p) {
						turns, _, _ := n.st.ListTurns(ctx, tenant, mono, forge.ListOptions{Limit: 10000})
						for _, tr := range turns {
							t.Logf("monologue %s turn %s %s %v trigger %+v", mono, tr.ID, tr.Status, tr.CancelReason, tr.Trigger)
						}
					}
					for _, x := range msgs {
						if x.Kind == forge.ForumKindReply && x.Author.ParticipantID == m.Author.ParticipantID {
							t.Logf("reply %s to %s", x.ID, *x.ReplyTo)
						}
					}
					t.Fatalf("stint %s answered %s twice", m.Author.ParticipantID, *m.ReplyTo)
				}
				answered[key] = true
			default:
				t.Fatalf("forum message of kind %q", m.Kind)
			}
		}
		evs, err := n.st.ListEvents(ctx, tenant, forge.EventQuery{SessionID: f, Limit: 100000})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == forge.EventMonologueCompacted {
				swaps++
			}
			switch ev.Type {
			case forge.EventForumMessage, forge.EventForumMemberJoined, forge.EventForumMemberLeft, forge.EventMonologueCompacted:
			default:
				t.Fatalf("forum %s stores a %s event", f, ev.Type)
			}
			if ev.TurnID != nil {
				t.Fatalf("forum event %d belongs to turn %s", ev.Seq, *ev.TurnID)
			}
		}
		// Every monologue of every stint: copies carry their source once,
		// and each published turn went to this forum.
		stints, _, err := n.st.ListParticipants(ctx, tenant, f, true, forge.ListOptions{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range stints {
			if p.Actor.Type != forge.ActorAgent {
				continue
			}
			for _, mono := range monologues(t, n, f, p) {
				loose, _, err := n.st.ListLoose(ctx, tenant, mono, forge.ListOptions{Limit: 10000})
				if err != nil {
					t.Fatal(err)
				}
				seen := map[string]bool{}
				for _, c := range loose {
					if c.Origin == "" {
						continue
					}
					var src forge.SourceMeta
					if err := json.Unmarshal(c.Metadata, &src); err != nil || src.SourceMessageID == "" || src.SourceConversationID != f {
						t.Fatalf("copy %s in %s has source %s", c.ID, mono, c.Metadata)
					}
					if seen[src.SourceMessageID] {
						t.Fatalf("monologue %s holds two copies of %s", mono, src.SourceMessageID)
					}
					seen[src.SourceMessageID] = true
					if c.Origin != "copy:"+src.SourceMessageID || byID[src.SourceMessageID] == nil {
						t.Fatalf("copy %s: origin %s, source %s", c.ID, c.Origin, src.SourceMessageID)
					}
				}
				turns, _, err := n.st.ListTurns(ctx, tenant, mono, forge.ListOptions{Limit: 10000})
				if err != nil {
					t.Fatal(err)
				}
				for _, tr := range turns {
					if tr.Trigger != nil && tr.Trigger.SourceConversationID != f {
						t.Fatalf("turn %s of %s answers forum %s", tr.ID, mono, tr.Trigger.SourceConversationID)
					}
				}
			}
		}
	}
	t.Logf("%d replies, %d monologue swaps", replies, swaps)
}

// monologues lists a stint's monologues: the current one and those the
// forum's compaction events name.
func monologues(t *testing.T, n *node, forumID string, p *forge.Participant) []string {
	t.Helper()
	out := []string{p.Metadata.MonologueID}
	evs, err := n.st.ListEvents(context.Background(), tenant, forge.EventQuery{SessionID: forumID, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type != forge.EventMonologueCompacted || ev.ID != p.ID {
			continue
		}
		var d map[string]string
		_ = json.Unmarshal(ev.Data, &d)
		out = append(out, d["old_monologue_id"])
	}
	return out
}

// TestEventsSubscribesBeforeItReturns: an ephemeral event published after
// Events returned, before anything ranged over its result, reaches the
// stream. The HTTP handler sends the stream's headers once Events
// returned; a client that then posts must see the agent's typing.
func TestEventsSubscribesBeforeItReturns(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir()+"/forge.db", nil)
	defer n.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := n.forums.CreateForum(ctx, tenant, "room", nil, forge.ForumGuards{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := n.st.ListEvents(ctx, tenant, forge.EventQuery{SessionID: f.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var after int64
	if len(stored) > 0 {
		after = stored[len(stored)-1].Seq
	}
	events, err := n.forums.Events(ctx, tenant, f.ID, after)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.eng.PublishEphemeral(ctx, f.ID, eventlog.Draft{Type: forge.EventForumTyping, ID: "agent:helper",
		Data: forum.TypingData{ParticipantID: "agent:helper", Typing: true}}); err != nil {
		t.Fatal(err)
	}
	for ev, err := range events {
		if err != nil {
			t.Fatalf("stream ended before the typing event: %v", err)
		}
		if ev.Type != forge.EventForumTyping {
			t.Fatalf("first event %s, want the %s published before the stream was read", ev.Type, forge.EventForumTyping)
		}
		return
	}
	t.Fatal("stream ended before the typing event")
}
