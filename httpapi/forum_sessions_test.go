package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
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

// TestCopyHasNullTurnID: a forum message's copy in a monologue belongs to
// no turn: "turn_id": null in the messages API and in its
// message.created event's data; a direct session's messages keep theirs.
func TestCopyHasNullTurnID(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.createAgent("echo")
	fid, stint := s.forumWithAgent("echo")
	mono := stint.Metadata.MonologueID
	s.call("POST", "/v1/forums/"+fid+"/messages", map[string]any{"author": "alice", "text": "hello"}, 201, nil)
	var copied map[string]any
	for deadline := time.Now().Add(10 * time.Second); copied == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the message was not copied into the monologue")
		}
		var list struct{ Data []map[string]any }
		s.call("GET", "/v1/sessions/"+mono+"/messages", nil, 200, &list)
		for _, m := range list.Data {
			if m["role"] == "user" {
				copied = m
			}
		}
	}
	if v, ok := copied["turn_id"]; !ok || v != nil {
		t.Fatalf("the copy's turn_id is %#v (present %v), want null", v, ok)
	}
	var evs struct{ Data []forge.Event }
	s.call("GET", "/v1/sessions/"+mono+"/events", nil, 200, &evs)
	found := false
	for _, ev := range evs.Data {
		if ev.Type != forge.EventMessageCreated || ev.ID != copied["id"] {
			continue
		}
		found = true
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if v, ok := data["turn_id"]; !ok || v != nil {
			t.Fatalf("message.created of the copy has turn_id %#v (present %v), want null", v, ok)
		}
	}
	if !found {
		t.Fatalf("no message.created event for the copy %v", copied["id"])
	}

	ses := s.createSession("echo")
	var turn forge.Turn
	a := s.do(req{method: "POST", path: "/v1/sessions/" + ses.ID + "/turns", body: msgTurn("hi")})
	if err := json.Unmarshal(a.body, &turn); err != nil || turn.ID == "" {
		t.Fatalf("POST turns: %s", a)
	}
	s.waitTurn(ses.ID, turn.ID)
	var list struct{ Data []map[string]any }
	s.call("GET", "/v1/sessions/"+ses.ID+"/messages", nil, 200, &list)
	if len(list.Data) == 0 {
		t.Fatal("the direct session has no messages")
	}
	for _, m := range list.Data {
		if m["turn_id"] != turn.ID {
			t.Fatalf("a direct session's message has turn_id %#v, want %s", m["turn_id"], turn.ID)
		}
	}
}
