package forum_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
)

// slowAgents creates agents whose every turn answers with a few words
// streamed 10 ms apart, so that the turns several agents run for one
// message overlap: replies are in flight when a guard fires.
func slowAgents(t *testing.T, n *node, names ...string) {
	t.Helper()
	params := forge.ModelParams{Script: scripted.Script(scripted.Step{Text: "noted, over to the next one", DelayMS: 10})}
	for _, a := range names {
		if err := n.st.CreateAgent(context.Background(), &forge.Agent{Tenant: tenant, Name: a, Model: "scripted/slow", ModelParams: params}); err != nil {
			t.Fatal(err)
		}
	}
}

// streaks splits a forum's messages at each human message: the replies
// and notices after each.
func streaks(t *testing.T, n *node, forumID string) (replies, notices []int) {
	t.Helper()
	msgs, _, err := n.forums.Messages(context.Background(), tenant, forumID, forge.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		switch m.Kind {
		case forge.ForumKindMessage:
			replies, notices = append(replies, 0), append(notices, 0)
		case forge.ForumKindReply:
			replies[len(replies)-1]++
		case forge.ForumKindNotice:
			notices[len(notices)-1]++
		}
	}
	return replies, notices
}

// decisions checks that every triggered monologue turn that ended with
// output was decided exactly once, published (a reply of origin
// reply:<turn>) or withheld (its output marked), and counts the withheld.
func decisions(t *testing.T, n *node, forumID string) (published, withheld int) {
	t.Helper()
	ctx := context.Background()
	stints, _, err := n.st.ListParticipants(ctx, tenant, forumID, true, forge.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stints {
		if p.Actor.Type != forge.ActorAgent {
			continue
		}
		turns, _, err := n.st.ListTurns(ctx, tenant, p.Metadata.MonologueID, forge.ListOptions{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range turns {
			if tr.Trigger == nil || tr.Status != forge.TurnDone || tr.Output == nil || tr.Output.Text == "" {
				continue
			}
			_, rerr := n.st.MessageByOrigin(ctx, tenant, forumID, "reply:"+tr.ID)
			msgs, err := n.st.TurnMessages(ctx, tenant, tr.ID)
			if err != nil {
				t.Fatal(err)
			}
			var meta forge.SourceMeta
			for _, m := range msgs {
				if m.ID == tr.Output.MessageID && len(m.Metadata) > 0 {
					_ = json.Unmarshal(m.Metadata, &meta)
				}
			}
			switch {
			case rerr == nil && meta.Type == forge.MetadataTypeReply:
				published++
			case rerr != nil && meta.Type == forge.MetadataTypeWithheld:
				withheld++
			default:
				t.Fatalf("turn %s of %s: reply lookup %v, output marked %q: decided neither once nor at all", tr.ID, p.ActorID, rerr, meta.Type)
			}
		}
	}
	return published, withheld
}

// TestStreakGuardHoldsRepliesInFlight: agents that answer everything
// (trigger always) loop after a human post until max_agent_streak; the
// replies of turns that were running when the guard fired are withheld,
// so exactly max_agent_streak replies follow each human message, with one
// notice, however many agents answer at once.
func TestStreakGuardHoldsRepliesInFlight(t *testing.T) {
	t.Parallel()
	for _, agents := range []int{2, 5} {
		t.Run(fmt.Sprint(agents, " agents"), func(t *testing.T) {
			t.Parallel()
			n := openNode(t, t.TempDir()+"/forge.db", nil)
			defer n.close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			guards := forge.DefaultForumGuards()
			guards.PairWindow.Max = forge.PairWindowMaxLimit // the streak guard alone
			f, err := n.forums.CreateForum(ctx, tenant, "loop", nil, guards)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: "alice"}, ""); err != nil {
				t.Fatal(err)
			}
			var names []string
			for i := range agents {
				names = append(names, fmt.Sprint("agent", i))
			}
			slowAgents(t, n, names...)
			for _, a := range names {
				if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: a}, forge.TriggerAlways); err != nil {
					t.Fatal(err)
				}
			}
			const posts = 3
			for i := range posts {
				if _, err := n.forums.Post(ctx, tenant, f.ID, "alice", fmt.Sprint("go ", i), nil, nil); err != nil {
					t.Fatal(err)
				}
				quiesce(t, n, []string{f.ID})
			}
			replies, notices := streaks(t, n, f.ID)
			want := guards.MaxAgentStreak
			for i := range replies {
				if replies[i] != want || notices[i] != 1 {
					t.Fatalf("after human message %d: %d replies and %d notices, want %d and 1 (all: %v, %v)", i, replies[i], notices[i], want, replies, notices)
				}
			}
			published, withheld := decisions(t, n, f.ID)
			if published != posts*want {
				t.Fatalf("%d replies published, want %d", published, posts*want)
			}
			t.Logf("%d agents: %d replies published, %d withheld", agents, published, withheld)
		})
	}
}

// TestPairWindowHoldsRepliesInFlight: two agents that answer everything,
// with a streak limit out of the way: at most pair_window.max replies
// pass between them within the window, the turns in flight included.
func TestPairWindowHoldsRepliesInFlight(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir()+"/forge.db", nil)
	defer n.close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	guards := forge.ForumGuards{MaxAgentStreak: forge.MaxAgentStreakLimit, PairWindow: forge.PairWindow{Max: 4, Seconds: 3600}}
	f, err := n.forums.CreateForum(ctx, tenant, "pair", nil, guards)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: "alice"}, ""); err != nil {
		t.Fatal(err)
	}
	slowAgents(t, n, "ann", "bob")
	for _, a := range []string{"ann", "bob"} {
		if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: a}, forge.TriggerAlways); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.forums.Post(ctx, tenant, f.ID, "alice", "go", nil, nil); err != nil {
		t.Fatal(err)
	}
	quiesce(t, n, []string{f.ID})
	msgs, _, err := n.forums.Messages(ctx, tenant, f.ID, forge.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	kind := map[string]string{}
	between, notices := 0, 0
	for _, m := range msgs {
		kind[m.ID] = m.Kind
		switch {
		case m.Kind == forge.ForumKindNotice:
			notices++
		case m.Kind == forge.ForumKindReply && kind[*m.ReplyTo] == forge.ForumKindReply:
			between++ // ann answering bob or bob answering ann
		}
	}
	if between != guards.PairWindow.Max || notices != 1 {
		t.Fatalf("%d replies between the agents and %d notices, want %d and 1", between, notices, guards.PairWindow.Max)
	}
	decisions(t, n, f.ID)
}

// TestWithheldReplyStaysWithheldAfterARestart: a withheld reply is a
// decision, like a published one. A human post taken just before a crash
// (by another replica, say) ends the streak, yet the restart's recovery
// does not publish the reply withheld before it.
func TestWithheldReplyStaysWithheldAfterARestart(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/forge.db"
	n := openNode(t, db, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One reply per human message: of two agents answering it at once,
	// the second is withheld.
	f, err := n.forums.CreateForum(ctx, tenant, "one", nil, forge.ForumGuards{MaxAgentStreak: 1, PairWindow: forge.PairWindow{Max: 100, Seconds: 60}})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: "alice"}, "")
	if err != nil {
		t.Fatal(err)
	}
	slowAgents(t, n, "ann", "bob")
	for _, a := range []string{"ann", "bob"} {
		if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: a}, forge.TriggerAlways); err != nil {
			t.Fatal(err)
		}
	}
	first, err := n.forums.Post(ctx, tenant, f.ID, "alice", "first", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	quiesce(t, n, []string{f.ID})
	if published, withheld := decisions(t, n, f.ID); published != 1 || withheld != 1 {
		t.Fatalf("%d published, %d withheld; want one each", published, withheld)
	}
	n.close()
	// The post another replica took: in the store, delivered to no one.
	now := time.Now()
	post := &forge.Message{ID: forge.NewULIDGen(nil).New(forge.PrefixMessage), Tenant: tenant, SessionID: f.ID, Role: forge.RoleUser,
		Author: alice.ActorID, CreatedAt: now, Forum: &forge.ForumInfo{Kind: forge.ForumKindMessage, ParticipantID: alice.ID, ActorID: alice.ActorID}}
	post.Parts = []*forge.Part{{ID: forge.NewULIDGen(nil).New(forge.PrefixPart), MessageID: post.ID, SessionID: f.ID, Type: forge.PartText,
		Text: "second", State: forge.StateCompleted, CreatedAt: now, UpdatedAt: now}}
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AppendLoose(ctx, &forge.LooseAppend{Tenant: tenant, SessionID: f.ID, Messages: []*forge.Message{post}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n = openNode(t, db, nil) // recovery runs with the streak ended
	defer n.close()
	quiesce(t, n, []string{f.ID})
	msgs, _, err := n.forums.Messages(ctx, tenant, f.ID, forge.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	var toFirst []string
	for _, m := range msgs {
		if m.Kind == forge.ForumKindReply && *m.ReplyTo == first.ID {
			toFirst = append(toFirst, m.Author.ActorID)
		}
	}
	if len(toFirst) != 1 {
		t.Fatalf("the first post has replies from %s after the restart, want the one published before it", strings.Join(toFirst, ", "))
	}
	decisions(t, n, f.ID)
}
