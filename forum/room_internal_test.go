package forum

import (
	"fmt"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestGuardStateStaysBounded: the room remembers the authors of its last
// recentMessages messages, however many are posted, and still pairs a
// reply with the recent agent reply it answers.
func TestGuardStateStaysBounded(t *testing.T) {
	t.Parallel()
	r := &room{pairs: map[string][]time.Time{}, lastSeen: map[string]string{}}
	now := time.Now()
	prev := ""
	for i := range 10 * recentMessages {
		m := &forge.Message{ID: fmt.Sprintf("msg_%06d", i), CreatedAt: now,
			Forum: &forge.ForumInfo{Kind: forge.ForumKindReply, ActorID: []string{"agent:ann", "agent:bob"}[i%2], ReplyTo: prev}}
		r.account(m)
		prev = m.ID
	}
	if len(r.lastSeen) != recentMessages {
		t.Fatalf("the room remembers %d authors after %d messages, want %d", len(r.lastSeen), 10*recentMessages, recentMessages)
	}
	for i := 9 * recentMessages; i < 10*recentMessages; i++ {
		if _, ok := r.lastSeen[fmt.Sprintf("msg_%06d", i)]; !ok {
			t.Fatalf("msg_%06d, among the last %d, is forgotten", i, recentMessages)
		}
	}
	reply := &forge.ForumInfo{Kind: forge.ForumKindReply, ActorID: "agent:ann", ReplyTo: prev}
	if got := r.pairKey(reply); got != "agent:ann\x00agent:bob" {
		t.Fatalf("pairKey of a reply to the newest message = %q, want the ann/bob pair", got)
	}
}
