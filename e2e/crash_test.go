package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

func TestKill9MidStreamThenRestart(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model)
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("confirmed ", "before ", "the crash").HangAfter(4)) // the role chunk, then three pieces
	ch, cancel := s.stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
	defer cancel()
	seen := until(t, ch, func(seen []event) bool { return deltaText(seen) == "confirmed before the crash" })
	tid := seen[0].Data["id"].(string)
	lastSeen := seen[len(seen)-1].ID
	// Wait for a checkpoint to store the streamed text (GET /messages
	// reads the store), then kill.
	waitFor(t, func() bool {
		msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
		for _, p := range msgs[len(msgs)-1].(obj)["parts"].([]any) {
			if p.(obj)["type"] == "text" && p.(obj)["text"] == "confirmed before the crash" {
				return true
			}
		}
		return false
	})
	s.kill9()

	// A second server on the same file must wait for the first to die;
	// now it starts, and recovery closes the abandoned turn.
	s2 := start(t, db, model)
	turn := s2.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil)
	if turn["status"] != "cancelled" || turn["cancel_reason"] != "abandoned" {
		t.Fatalf("recovered turn %v", turn)
	}
	if seq := turn["last_seq"].(float64); int64(seq) <= lastSeen {
		t.Fatalf("turn.done seq %v not above seq %d a client saw", seq, lastSeen)
	}
	msgs := s2.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil)["data"].([]any)
	assistant := msgs[len(msgs)-1].(obj)
	var text, state string
	for _, p := range assistant["parts"].([]any) {
		if p.(obj)["type"] == "text" {
			text, state = p.(obj)["text"].(string), p.(obj)["state"].(string)
		}
	}
	if text != "confirmed before the crash" || state != "interrupted" {
		t.Fatalf("recovered part %q %s", text, state)
	}
	// Resuming the turn stream after the last seen seq yields the closing
	// events, ending with turn.done.
	ch2, cancel2 := s2.stream("GET", "/v1/sessions/"+sid+"/turns/"+tid+"/events", nil, "Last-Event-ID", itoa(lastSeen))
	defer cancel2()
	rest := collect(t, ch2)
	if len(rest) < 2 || rest[0].Type != "model.message" || rest[len(rest)-1].Type != "turn.done" {
		t.Fatalf("after recovery: %v", rest)
	}
	// The session continues.
	model.Enqueue(openaitest.Text("back"))
	next := s2.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("still there?"))
	if next["output"].(obj)["text"] != "back" || next["previous_turn_id"] != tid {
		t.Fatalf("next turn %v", next)
	}
	req, _ := model.LastRequest()
	if got := req.Messages[len(req.Messages)-2].Content; got != "confirmed before the crash" {
		t.Fatalf("model was sent the interrupted text %q", got)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestSecondServerOnSameFileRefuses(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	start(t, db, model)
	if _, err := tryStart(t, db, model); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server: %v", err)
	}
	// The same file under other names: a symlink and a hard link (each
	// would have its own -wal file, and a second server's recovery would
	// abandon the first one's turns).
	dir := t.TempDir()
	if err := os.Symlink(db, dir+"/symlink.db"); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(db, dir+"/hardlink.db"); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{dir + "/symlink.db", dir + "/hardlink.db"} {
		if _, err := tryStart(t, other, model); err == nil || !strings.Contains(err.Error(), "in use") {
			t.Fatalf("second server on %s: %v", other, err)
		}
		out, err := exec.Command(forgeBin, "keys", "create", "--tenant", "t", "--db", other).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "in use") {
			t.Fatalf("forge keys create --db %s while a server owns it: %v: %s", other, err, out)
		}
	}
}

func TestGracefulShutdownCancelsAfterGrace(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model, "--shutdown-grace", "500ms")
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("stuck").HangAfter(1))
	bg := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	waitFor(t, func() bool { return model.Pending() == 0 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-s.waitExit(); err != nil {
		t.Fatalf("forge serve exited with %v after SIGTERM", err)
	}
	s2 := start(t, db, model)
	turn := s2.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+bg["id"].(string), nil)
	if turn["status"] != "cancelled" || turn["cancel_reason"] != "shutdown" {
		t.Fatalf("turn after shutdown %v", turn)
	}
}

func TestGracefulShutdownLetsTurnsFinish(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	db := t.TempDir() + "/forge.db"
	s := start(t, db, model, "--shutdown-grace", "20s")
	s.agent(obj{"name": "a", "model": "openai/gpt-test"})
	sid := s.session("a")
	model.Enqueue(openaitest.Text("fin", "ished", " in", " time").DelayBetweenChunks(150 * time.Millisecond))
	bg := s.must(202, "POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "background": true})
	waitFor(t, func() bool { return model.Pending() == 0 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-s.waitExit(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	s2 := start(t, db, model)
	turn := s2.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+bg["id"].(string), nil)
	if turn["status"] != "done" || turn["output"].(obj)["text"] != "finished in time" {
		t.Fatalf("turn after graceful shutdown %v", turn)
	}
}

func TestRefusesPublicAddressWithoutKeys(t *testing.T) {
	t.Parallel()
	model := openaitest.New(t)
	_, err := tryStart(t, t.TempDir()+"/forge.db", model, "--addr", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "without API keys") {
		t.Fatalf("public address without keys: %v", err)
	}
}
