package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestTodoListReadableThroughAPI: the agent keeps a task list with the todo
// capability; the list survives a restart and is readable through the API.
func TestTodoListReadableThroughAPI(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"todo"}})
	sid := s.session("a")
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "todo_write", Args: `{"items":[{"content":"write tests","status":"in_progress"}]}`}),
		openaitest.Text("on it"),
	)
	s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("plan"))
	caps := s.must(200, "GET", "/v1/sessions/"+sid+"/capabilities", nil)["data"].(obj)
	items := caps["todo"].(obj)["items"].([]any)
	if len(items) != 1 || items[0].(obj)["status"] != "in_progress" {
		t.Fatalf("capabilities %v", caps)
	}
	s.kill9()
	s2 := start(t, db, model)
	model.Enqueue(openaitest.ToolCalls(openaitest.Call{Name: "todo_read", Args: `{}`}), openaitest.Text("still there"))
	s2.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("what was the plan?"))
	req, _ := model.LastRequest()
	if got := req.Messages[len(req.Messages)-1].Content; got != "1. [in_progress] write tests" {
		t.Fatalf("todo_read after restart: %q", got)
	}
}

// TestSandboxToolsThroughServe: write_file and bash run in the session's
// sandbox next to the database, and the step records a patch event.
func TestSandboxToolsThroughServe(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"write_file", "bash"}})
	sid := s.session("a")
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "write_file", Args: `{"path":"hello.txt","content":"hi\n"}`}),
		openaitest.ToolCalls(openaitest.Call{Name: "bash", Args: `{"command":"wc -l < hello.txt"}`}),
		openaitest.Text("done"),
	)
	turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("write and count"))
	if turn["status"] != "done" {
		t.Fatalf("turn %v", turn)
	}
	req, _ := model.LastRequest()
	if got := strings.TrimSpace(req.Messages[len(req.Messages)-1].Content); got != "1" {
		t.Fatalf("bash saw %q", got)
	}
	evs := s.must(200, "GET", "/v1/sessions/"+sid+"/events", nil)["data"].([]any)
	var types []string
	for _, e := range evs {
		types = append(types, e.(obj)["type"].(string))
	}
	joined := strings.Join(types, " ")
	if !strings.Contains(joined, "sandbox.created") || !strings.Contains(joined, "patch") {
		t.Fatalf("events %s", joined)
	}
	matches, _ := filepath.Glob(db + ".sandboxes/*/work/hello.txt")
	if len(matches) != 1 {
		t.Fatalf("sandbox file %v", matches)
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "hi\n" {
		t.Fatalf("file %q", b)
	}
}

// TestWorkspaceRestoreThroughServe: a step that writes a file names a
// workspace snapshot on its step-finish part; after a later turn changes
// the file and adds one, POST /sandbox/restore brings the workspace back.
func TestWorkspaceRestoreThroughServe(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "a", "model": "openai/gpt-test", "tools": []any{"write_file"}})
	sid := s.session("a")
	model.Enqueue(
		openaitest.ToolCalls(openaitest.Call{Name: "write_file", Args: `{"path":"hello.txt","content":"hi\n"}`}),
		openaitest.Text("done"),
		openaitest.ToolCalls(openaitest.Call{Name: "write_file", Args: `{"path":"hello.txt","content":"changed\n"}`},
			openaitest.Call{Name: "write_file", Args: `{"path":"new.txt","content":"new\n"}`}),
		openaitest.Text("done again"),
	)
	s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("write"))
	var snapshots []string
	for _, m := range s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any) {
		for _, p := range m.(obj)["parts"].([]any) {
			if p.(obj)["type"] == "step-finish" {
				id, _ := p.(obj)["data"].(obj)["snapshot"].(string)
				snapshots = append(snapshots, id)
			}
		}
	}
	if len(snapshots) != 2 || !strings.HasPrefix(snapshots[0], "snap_") || snapshots[1] != "" {
		t.Fatalf("step-finish snapshots %q", snapshots)
	}
	s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("change"))
	work, _ := filepath.Glob(db + ".sandboxes/*/work")
	if len(work) != 1 {
		t.Fatalf("work directories %v", work)
	}
	if b, _ := os.ReadFile(work[0] + "/hello.txt"); string(b) != "changed\n" {
		t.Fatalf("hello.txt %q", b)
	}
	res := s.must(200, "POST", "/v1/sessions/"+sid+"/sandbox/restore", obj{"snapshot": snapshots[0]})
	if res["written"] != float64(1) || res["removed"] != float64(1) || res["partial"] != false {
		t.Fatalf("restore %v", res)
	}
	if b, _ := os.ReadFile(work[0] + "/hello.txt"); string(b) != "hi\n" {
		t.Fatalf("hello.txt after restore %q", b)
	}
	if _, err := os.Stat(work[0] + "/new.txt"); !os.IsNotExist(err) {
		t.Fatalf("new.txt after restore: %v", err)
	}
	if status, out := s.call("POST", "/v1/sessions/"+sid+"/sandbox/restore", obj{"snapshot": "../../etc"}); status != 400 {
		t.Fatalf("traversal id: %d %v", status, out)
	}
}
