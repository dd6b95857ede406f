package forum_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestLeaveCopiesWhatWasPostedBefore: posts race a leave; the leaving
// stint's monologue holds a copy of exactly the forum messages posted
// between its forum.member.joined and forum.member.left events (API.md:
// the stints that get a copy are those active when the message is
// posted), none missing, none from after the leave.
func TestLeaveCopiesWhatWasPostedBefore(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir()+"/forge.db", nil)
	defer n.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.st.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: "quiet", Model: "scripted/echo"}); err != nil {
		t.Fatal(err)
	}
	f, err := n.forums.CreateForum(ctx, tenant, "room", json.RawMessage(`{}`), forge.DefaultForumGuards())
	if err != nil {
		t.Fatal(err)
	}
	humans := []string{"hal", "ivy"}
	for _, h := range humans {
		if _, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorHuman, ID: h}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Trigger mention and no mentions: copies only, no turns.
	p, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: "quiet"}, forge.TriggerMention)
	if err != nil {
		t.Fatal(err)
	}
	// The posters run until the leave has returned and each has posted
	// some more; the leave starts once both have posted a few.
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
		left    = make(chan struct{})
	)
	for _, h := range humans {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			after := 0
			for i := 0; ; i++ {
				if _, err := n.forums.Post(ctx, tenant, f.ID, h, fmt.Sprintf("%s %d", h, i), nil, nil); err != nil {
					t.Errorf("post: %v", err)
					if i < 5 {
						started.Done()
					}
					return
				}
				if i == 4 {
					started.Done()
				}
				select {
				case <-left:
					if after++; after == 5 {
						return
					}
				default:
				}
			}
		}()
	}
	started.Wait()
	if _, err := n.forums.Leave(ctx, tenant, f.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	close(left)
	wg.Wait()

	evs, err := n.st.ListEvents(ctx, tenant, forge.EventQuery{SessionID: f.ID, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	in, after := false, 0
	for _, ev := range evs {
		switch {
		case ev.Type == forge.EventForumMemberJoined && ev.ID == p.ID:
			in = true
		case ev.Type == forge.EventForumMemberLeft && ev.ID == p.ID:
			in = false
		case ev.Type == forge.EventForumMessage && in:
			want = append(want, ev.ID)
		case ev.Type == forge.EventForumMessage && len(want) > 0:
			after++
		}
	}
	if after == 0 {
		t.Fatal("no message was posted after the leave")
	}
	copies, _, err := n.st.ListLoose(ctx, tenant, p.Metadata.MonologueID, forge.ListOptions{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range copies {
		var src forge.SourceMeta
		if err := json.Unmarshal(c.Metadata, &src); err != nil || src.SourceMessageID == "" {
			t.Fatalf("monologue message %s has source %s", c.ID, c.Metadata)
		}
		got = append(got, src.SourceMessageID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		var missing, extra []string
		for _, id := range want {
			if _, ok := slices.BinarySearch(got, id); !ok {
				missing = append(missing, id)
			}
		}
		for _, id := range got {
			if _, ok := slices.BinarySearch(want, id); !ok {
				extra = append(extra, id)
			}
		}
		t.Fatalf("the stint's monologue holds %d copies, %d messages were posted while it was active: missing %v, extra %v", len(got), len(want), missing, extra)
	}
}
