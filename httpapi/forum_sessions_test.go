package httpapi_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/scripted"
)

// forumWithAgent creates a forum with the human alice and the agent as
// members (trigger always) and returns the forum and the agent's stint.
func (s *stack) forumWithAgent(agent string) (forumID string, stint forge.Participant) {
	s.t.Helper()
	var f struct{ ID string }
	s.call("POST", "/v1/forums", map[string]any{"title": "room"}, 201, &f)
	s.call("POST", "/v1/forums/"+f.ID+"/members", map[string]any{"actor": map[string]any{"type": "human", "id": "alice"}}, 201, nil)
	s.call("POST", "/v1/forums/"+f.ID+"/members", map[string]any{"actor": map[string]any{"type": "agent", "agent": agent}, "trigger": "always"}, 201, &stint)
	return f.ID, stint
}

// runningTurn waits until the session has a running turn and returns it.
func (s *stack) runningTurn(sid string) *forge.Turn {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		running, err := s.store.RunningTurns(context.Background())
		if err != nil {
			s.t.Fatal(err)
		}
		for _, t := range running {
			if t.SessionID == sid {
				return t
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("no turn runs in session %s", sid)
	return nil
}

// TestDeleteMonologueOfActiveStint: DELETE /v1/sessions/{monologue} is
// refused (409 conflict, saying to leave first) while the monologue's
// stint is active; it would leave the agent in the room, deaf. Once the
// stint has left, the monologue may be deleted.
func TestDeleteMonologueOfActiveStint(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("echo")
	fid, stint := s.forumWithAgent("echo")
	mono := stint.Metadata.MonologueID
	tests := []struct {
		name  string
		leave bool
		want  int
	}{
		{"active stint", false, 409},
		{"ended stint", true, 204},
	}
	for _, tc := range tests {
		if tc.leave {
			s.call("DELETE", "/v1/forums/"+fid+"/members/"+stint.ID, nil, 200, nil)
		}
		a := s.do(req{method: "DELETE", path: "/v1/sessions/" + mono})
		if a.status != tc.want {
			t.Fatalf("%s: DELETE /v1/sessions/%s: got %s, want %d", tc.name, mono, a, tc.want)
		}
		if tc.want == 409 {
			if a.errCode() != "conflict" || !strings.Contains(string(a.body), "/v1/forums/"+fid+"/members/"+stint.ID) {
				t.Fatalf("%s: got %s, want conflict naming DELETE /v1/forums/%s/members/%s", tc.name, a, fid, stint.ID)
			}
			s.call("GET", "/v1/sessions/"+mono, nil, 200, nil)
			var p forge.Participant
			s.call("GET", "/v1/forums/"+fid+"/members/"+stint.ID, nil, 200, &p)
			if p.LeftAt != nil {
				t.Fatalf("%s: the refused delete ended the stint", tc.name)
			}
		}
	}
	s.call("GET", "/v1/sessions/"+mono, nil, 404, nil)
}

// TestDeleteForumThroughSessions: DELETE /v1/sessions/{forum} does what
// DELETE /v1/forums/{fid} does: the running monologue turn is cancelled
// and every stint ends.
func TestDeleteForumThroughSessions(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/forge.db"
	s := newStackAt(t, db)
	s.createAgent("thinker", scripted.Step{Text: "thinking", Hang: true})
	fid, stint := s.forumWithAgent("thinker")
	mono := stint.Metadata.MonologueID
	s.call("POST", "/v1/forums/"+fid+"/messages", map[string]any{"author": "alice", "text": "hello"}, 201, nil)
	turn := s.runningTurn(mono)

	s.call("DELETE", "/v1/sessions/"+fid, nil, 204, nil)

	ctx := context.Background()
	got, err := s.store.GetTurn(ctx, forge.DefaultTenant, mono, turn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != forge.TurnCancelled {
		t.Fatalf("the monologue turn is %s after the forum's delete, want cancelled", got.Status)
	}
	if n := activeStints(t, db, fid); n != 0 {
		t.Fatalf("%d stints of the deleted forum are still active", n)
	}
	s.call("GET", "/v1/forums/"+fid, nil, 404, nil)
}

// activeStints counts the forum's active stints in the database file (the
// store answers not_found for a deleted forum's stints).
func activeStints(t *testing.T, db, forumID string) int {
	t.Helper()
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n int
	if err := conn.QueryRow(`SELECT count(*) FROM participants WHERE session_id = ? AND left_at IS NULL`, forumID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
