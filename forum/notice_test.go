package forum_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestGuardNoticeOnlyWhenATriggerIsStopped: with max_agent_streak 1 every
// reply is quiet, but the notice comes only when the reply would have
// triggered another agent (or a reply is withheld): never in a 1:1 chat
// (its only agent is not triggered by its own reply), once per streak
// with two agents that answer everything (one of them is published, the
// other withheld).
func TestGuardNoticeOnlyWhenATriggerIsStopped(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		agents  []string
		trigger string
		notices int
	}{
		{"1:1 chat", []string{"solo"}, forge.TriggerAuto, 0},
		{"two agents always", []string{"ann", "bob"}, forge.TriggerAlways, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := openNode(t, t.TempDir()+"/forge.db", nil)
			defer n.close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f, err := n.forums.CreateForum(ctx, tenant, "room", nil, forge.ForumGuards{MaxAgentStreak: 1, PairWindow: forge.PairWindow{Max: 100, Seconds: 60}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: "alice"}, ""); err != nil {
				t.Fatal(err)
			}
			for _, a := range c.agents {
				if err := n.st.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: a, Model: "scripted/echo"}); err != nil {
					t.Fatal(err)
				}
				if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: a}, c.trigger); err != nil {
					t.Fatal(err)
				}
			}
			const posts = 3
			for i := range posts {
				if _, err := n.forums.Post(ctx, tenant, f.ID, "alice", fmt.Sprint("hi ", i), nil, nil); err != nil {
					t.Fatal(err)
				}
				// One reply per post (quiet); another agent's is withheld.
				waitKinds(t, n, f.ID, forge.ForumKindReply, i+1)
				quiesce(t, n, []string{f.ID})
			}
			if got := countKind(t, n, f.ID, forge.ForumKindReply); got != posts {
				t.Fatalf("%d replies, want %d", got, posts)
			}
			if got := countKind(t, n, f.ID, forge.ForumKindNotice); got != c.notices {
				t.Fatalf("%d notices, want %d", got, c.notices)
			}
		})
	}
}

func countKind(t *testing.T, n *node, forumID, kind string) int {
	t.Helper()
	msgs, _, err := n.forums.Messages(context.Background(), tenant, forumID, forge.ListOptions{Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, m := range msgs {
		if m.Kind == kind {
			c++
		}
	}
	return c
}

// waitKinds waits until the forum holds at least want messages of kind.
func waitKinds(t *testing.T, n *node, forumID, kind string, want int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); countKind(t, n, forumID, kind) < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %s messages after 20 s", want, kind)
		}
	}
}
