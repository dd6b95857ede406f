package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sandbox"
)

// sandboxStack is a stack whose engine gives sessions sandboxes.
func sandboxStack(t *testing.T, opts ...stackOption) (*stack, *sandbox.Manager) {
	t.Helper()
	m, err := sandbox.NewManager(t.TempDir(), sandbox.Options{UseBwrap: sandbox.BwrapOff, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	s := newStackEngine(t, t.TempDir()+"/forge.db", func(c *engine.Config) { c.Sandboxes = m }, opts...)
	return s, m
}

func writeCall(path, content string) scripted.Step {
	args, _ := json.Marshal(map[string]string{"path": path, "content": content})
	return scripted.Step{ToolCalls: []scripted.ToolCall{{Name: "write_file", Arguments: args}}}
}

// stepSnapshots returns the snapshot ids of the session's step-finish
// parts, in order ("" for a step that changed no file).
func stepSnapshots(t *testing.T, s *stack, sid string) []string {
	t.Helper()
	var page struct{ Data []forge.Message }
	s.call("GET", "/v1/sessions/"+sid+"/messages", nil, 200, &page)
	var ids []string
	for _, m := range page.Data {
		for _, p := range m.Parts {
			if p.Type != forge.PartStepFinish {
				continue
			}
			var d forge.StepFinishData
			if err := json.Unmarshal(p.Data, &d); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, d.Snapshot)
		}
	}
	return ids
}

// A turn whose tool writes a file gets a step-finish naming the workspace
// snapshot; the turn snapshot keeps the sandbox info; after a second turn
// changes the file and adds another, restoring the first snapshot over
// HTTP brings the file back and removes the new one.
func TestRestoreWorkspaceOverHTTP(t *testing.T) {
	t.Parallel()
	s, m := sandboxStack(t)
	s.call("POST", "/v1/agents", map[string]any{"name": "w", "model": "scripted/w", "tools": []string{"write_file"},
		"model_params": map[string]any{"script": scripted.Script(
			writeCall("notes/a.txt", "one\n"), scripted.Step{Text: "written"},
			writeCall("notes/a.txt", "two\n"), writeCall("b.txt", "bee\n"), scripted.Step{Text: "rewritten"},
		)}}, 201, nil)
	ses := s.createSession("w")
	sp := "/v1/sessions/" + ses.ID
	var t1, t2 forge.Turn
	s.call("POST", sp+"/turns", msgTurn("write"), 200, &t1)
	snaps := stepSnapshots(t, s, ses.ID)
	if len(snaps) != 2 || snaps[0] == "" || snaps[1] != "" {
		t.Fatalf("step snapshots %q: want the writing step's only", snaps)
	}
	first := snaps[0]
	snap, err := s.store.GetSnapshot(t.Context(), forge.DefaultTenant, t1.ID)
	if err != nil {
		t.Fatal(err)
	}
	var info forge.SandboxInfo
	if err := json.Unmarshal(snap.Extra["sandbox"], &info); err != nil || info.Snapshot != first || info.Isolated {
		t.Fatalf("turn snapshot sandbox info %s (%v)", snap.Extra["sandbox"], err)
	}
	s.call("POST", sp+"/turns", msgTurn("again"), 200, &t2)
	snaps = stepSnapshots(t, s, ses.ID)
	if len(snaps) != 5 || snaps[2] == "" || snaps[3] == "" || snaps[2] == first || snaps[4] != "" {
		t.Fatalf("step snapshots %q", snaps)
	}
	work := filepath.Join(m.Root(), ses.ID, "work")
	if b, _ := os.ReadFile(filepath.Join(work, "notes/a.txt")); string(b) != "two\n" {
		t.Fatalf("a.txt %q", b)
	}
	var res forge.WorkspaceRestore
	s.call("POST", sp+"/sandbox/restore", map[string]any{"snapshot": first}, 200, &res)
	if res.Snapshot != first || res.Partial || res.Written != 1 || res.Removed != 1 {
		t.Fatalf("restore %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(work, "notes/a.txt")); string(b) != "one\n" {
		t.Fatalf("a.txt after restore %q", b)
	}
	if _, err := os.Lstat(filepath.Join(work, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt after restore: %v", err)
	}
	// The next turn's snapshot says what the files are now.
	var t3 forge.Turn
	s.call("POST", sp+"/turns", msgTurn("look"), 200, &t3)
	if snap, err = s.store.GetSnapshot(t.Context(), forge.DefaultTenant, t3.ID); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(snap.Extra["sandbox"], &info)
	if info.Snapshot != first {
		t.Fatalf("turn 3 sandbox info %s", snap.Extra["sandbox"])
	}
	// Deleting the session deletes its snapshots with its sandbox.
	s.call("DELETE", sp, nil, 204, nil)
	if _, err := os.Stat(filepath.Join(m.Root(), ses.ID)); !os.IsNotExist(err) {
		t.Fatalf("sandbox after delete: %v", err)
	}
}

// Refusals: a running turn (409), an id that is no snapshot id (400), a
// snapshot of another session or of another tenant's session (404), and a
// session of another tenant (404).
func TestRestoreWorkspaceRefusals(t *testing.T) {
	t.Parallel()
	s, _ := sandboxStack(t, func(c *httpapi.Config) { c.Keys = map[string]string{"k1": "t1", "k2": "t2"} })
	s.key = "k1"
	s.call("POST", "/v1/agents", map[string]any{"name": "w", "model": "scripted/w", "tools": []string{"write_file"},
		"model_params": map[string]any{"script": scripted.Script(writeCall("a.txt", "a"), scripted.Step{Text: "ok"}, scripted.Step{Hang: true})}}, 201, nil)
	mine := s.createSession("w")
	other := s.createSession("w")
	s.call("POST", "/v1/sessions/"+mine.ID+"/turns", msgTurn("write"), 200, nil)
	s.call("POST", "/v1/sessions/"+other.ID+"/turns", msgTurn("write"), 200, nil)
	snapMine := stepSnapshots(t, s, mine.ID)[0]
	snapOther := stepSnapshots(t, s, other.ID)[0]
	if snapMine == "" || snapOther == "" || snapMine == snapOther {
		t.Fatalf("snapshots %q %q", snapMine, snapOther)
	}
	restore := func(sid string, body any, key string) answer {
		return s.do(req{method: "POST", path: "/v1/sessions/" + sid + "/sandbox/restore", body: body,
			header: map[string]string{"Authorization": "Bearer " + key}})
	}
	for _, c := range []struct {
		name   string
		sid    string
		body   any
		key    string
		status int
		code   string
	}{
		{"another session's snapshot", mine.ID, map[string]any{"snapshot": snapOther}, "k1", 404, "not_found"},
		{"path traversal", mine.ID, map[string]any{"snapshot": "../.."}, "k1", 400, "invalid_request"},
		{"traversal with the prefix", mine.ID, map[string]any{"snapshot": "snap_../../" + other.ID + "/snapshots/manifests/" + snapOther}, "k1", 400, "invalid_request"},
		{"unknown snapshot", mine.ID, map[string]any{"snapshot": "snap_NOPE"}, "k1", 404, "not_found"},
		{"no snapshot", mine.ID, map[string]any{}, "k1", 400, "invalid_request"},
		{"no body", mine.ID, "", "k1", 400, "invalid_request"},
		{"unknown field", mine.ID, map[string]any{"snapshot": snapMine, "force": true}, "k1", 400, "invalid_request"},
		{"another tenant's session", mine.ID, map[string]any{"snapshot": snapMine}, "k2", 404, "not_found"},
	} {
		a := restore(c.sid, c.body, c.key)
		if a.status != c.status || a.errCode() != c.code {
			t.Errorf("%s: %s, want %d %s", c.name, a, c.status, c.code)
		}
	}
	// A turn running in the session: 409 until it has ended.
	var running forge.Turn
	s.call("POST", "/v1/sessions/"+mine.ID+"/turns", map[string]any{"input": []any{map[string]any{"type": "message", "text": "hang"}},
		"background": true}, 202, &running)
	if a := restore(mine.ID, map[string]any{"snapshot": snapMine}, "k1"); a.status != 409 || a.errCode() != "turn_in_progress" {
		t.Fatalf("restore during a turn: %s", a)
	}
	s.call("POST", "/v1/sessions/"+mine.ID+"/cancel", map[string]any{}, 200, nil)
	if a := restore(mine.ID, map[string]any{"snapshot": snapMine}, "k1"); a.status != 200 {
		t.Fatalf("restore after the turn: %s", a)
	}
}

// TestListWorkspaceSnapshots: the snapshots a session's sandbox keeps are
// the ids its step-finish parts name, oldest first; a session that never
// used a sandbox lists none; another tenant's session is not found.
func TestListWorkspaceSnapshots(t *testing.T) {
	t.Parallel()
	s, _ := sandboxStack(t, withKeys(map[string]string{"ka": "acme", "kb": "globex"}))
	s.key = "ka"
	s.call("POST", "/v1/agents", map[string]any{"name": "w", "model": "scripted/w", "tools": []string{"write_file"},
		"model_params": map[string]any{"script": scripted.Script(
			writeCall("a.txt", "one\n"), writeCall("b.txt", "two\n"), scripted.Step{Text: "written"},
		)}}, 201, nil)
	s.call("POST", "/v1/agents", map[string]any{"name": "plain", "model": "scripted/echo"}, 201, nil)
	ses := s.createSession("w")
	sp := "/v1/sessions/" + ses.ID
	var list struct{ Data []forge.WorkspaceSnapshotInfo }
	s.call("GET", sp+"/sandbox/snapshots", nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("before any turn: %+v", list.Data)
	}
	s.call("POST", sp+"/turns", msgTurn("write"), 200, nil)
	var want []string
	for _, id := range stepSnapshots(t, s, ses.ID) {
		if id != "" {
			want = append(want, id)
		}
	}
	s.call("GET", sp+"/sandbox/snapshots", nil, 200, &list)
	var got []string
	for _, sn := range list.Data {
		if sn.CreatedAt.IsZero() {
			t.Fatalf("snapshot without a time: %+v", sn)
		}
		got = append(got, sn.ID)
	}
	if len(want) != 2 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listed %q, the steps name %q", got, want)
	}
	plain := s.createSession("plain")
	s.call("GET", "/v1/sessions/"+plain.ID+"/sandbox/snapshots", nil, 200, &list)
	if len(list.Data) != 0 {
		t.Fatalf("a session without a sandbox lists %+v", list.Data)
	}
	s.key = "kb"
	if a := s.do(req{method: "GET", path: sp + "/sandbox/snapshots"}); a.status != 404 || a.errCode() != "not_found" {
		t.Fatalf("another tenant: %s", a)
	}
}
