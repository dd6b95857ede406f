package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// forgeCLI runs the forge binary and returns its stdout.
func forgeCLI(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(forgeBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("forge %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// createKey runs forge keys create and returns the key it printed alone.
func createKey(t *testing.T, db, tenant string) string {
	t.Helper()
	out := forgeCLI(t, "keys", "create", "--tenant", tenant, "--db", db)
	key := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(key, "fk_") || strings.ContainsAny(key, " \n\t") {
		t.Fatalf("keys create printed %q", out)
	}
	return key
}

func bearer(key string) []string { return []string{"Authorization", "Bearer " + key} }

// keyID finds the id of tenant's only key.
func keyID(t *testing.T, db, tenant string) string {
	t.Helper()
	var keys []struct{ ID string }
	if err := json.Unmarshal([]byte(forgeCLI(t, "keys", "list", "--tenant", tenant, "--json", "--db", db)), &keys); err != nil || len(keys) != 1 {
		t.Fatalf("keys list: %v %v", keys, err)
	}
	return keys[0].ID
}

// TestKeysCLIAgainstRunningServePostgres: keys made and revoked by the CLI
// take effect at once on a running forge serve sharing the PostgreSQL
// database, which runs a turn through the PostgreSQL store.
func TestKeysCLIAgainstRunningServePostgres(t *testing.T) {
	db := pgtest.NewDatabase(t)
	acme := createKey(t, db, "acme")
	model := openaitest.New(t)
	s := start(t, db, model, "--sandbox-root", t.TempDir())

	if st, _ := s.call("GET", "/v1/sessions", nil); st != 401 {
		t.Fatalf("no key: %d", st)
	}
	s.must(201, "POST", "/v1/agents", obj{"name": "a", "model": "openai/gpt-test"}, bearer(acme)...)
	sid := s.must(201, "POST", "/v1/sessions", obj{"agent": "a"}, bearer(acme)...)["id"].(string)
	model.Enqueue(openaitest.Text("Hel", "lo").Usage(12, 3))
	turn := s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("hi"), bearer(acme)...)
	if turn["status"] != "done" || turn["output"].(obj)["text"] != "Hello" {
		t.Fatalf("turn %v", turn)
	}

	// A key created while the server runs works at once, for its tenant.
	globex := createKey(t, db, "globex")
	s.must(200, "GET", "/v1/sessions", nil, bearer(globex)...)
	s.must(404, "GET", "/v1/sessions/"+sid, nil, bearer(globex)...)

	forgeCLI(t, "keys", "revoke", keyID(t, db, "acme"), "--db", db)
	if st, _ := s.call("GET", "/v1/sessions/"+sid, nil, bearer(acme)...); st != 401 {
		t.Fatalf("revoked key: %d", st)
	}
	s.must(200, "GET", "/v1/sessions", nil, bearer(globex)...)
}

// TestKeysCLIOnSQLite: on SQLite the keys are made before the server
// starts (it owns the file while it runs).
func TestKeysCLIOnSQLite(t *testing.T) {
	db := t.TempDir() + "/forge.db"
	key := createKey(t, db, "acme")
	s := start(t, db, openaitest.New(t))
	if st, _ := s.call("GET", "/v1/sessions", nil); st != 401 {
		t.Fatalf("no key: %d", st)
	}
	s.must(200, "GET", "/v1/sessions", nil, bearer(key)...)
	if st, _ := s.call("GET", "/v1/sessions", nil, bearer(key+"x")...); st != 401 {
		t.Fatalf("wrong key: %d", st)
	}
}

// TestKill9OnPostgresThenRestart: a turn streaming on a server that is
// killed is closed by the next server once its lease expires (running
// turns found through the cross-tenant lookup, read back through the
// tenant policy), with the text checkpointed before the crash; the session
// continues.
func TestKill9OnPostgresThenRestart(t *testing.T) {
	db := pgtest.NewDatabase(t)
	key := createKey(t, db, "acme")
	model := openaitest.New(t)
	s := start(t, db, model, "--sandbox-root", t.TempDir(), "--lease", "1s")
	s.must(201, "POST", "/v1/agents", obj{"name": "a", "model": "openai/gpt-test"}, bearer(key)...)
	sid := s.must(201, "POST", "/v1/sessions", obj{"agent": "a"}, bearer(key)...)["id"].(string)
	model.Enqueue(openaitest.Text("confirmed ", "before ", "the crash").HangAfter(4))
	ch, cancel := s.stream("POST", "/v1/sessions/"+sid+"/turns", message("go"), bearer(key)...)
	defer cancel()
	seen := until(t, ch, func(seen []event) bool { return deltaText(seen) == "confirmed before the crash" })
	tid := seen[0].Data["id"].(string)
	// Wait for the checkpoint that writes the streamed text to the store.
	waitFor(t, func() bool {
		msgs := s.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil, bearer(key)...)["data"].([]any)
		return strings.Contains(mustJSON(msgs[len(msgs)-1]), "confirmed before the crash")
	})
	s.kill9()

	s2 := start(t, db, model, "--sandbox-root", t.TempDir(), "--lease", "1s")
	// The restarted server is another replica to the lease: it takes the
	// turn over once the dead one's lease expires.
	var turn obj
	waitFor(t, func() bool {
		turn = s2.must(200, "GET", "/v1/sessions/"+sid+"/turns/"+tid, nil, bearer(key)...)
		return turn["status"] != "running"
	})
	if turn["status"] != "cancelled" || turn["cancel_reason"] != "abandoned" {
		t.Fatalf("recovered turn %v", turn)
	}
	msgs := s2.must(200, "GET", "/v1/sessions/"+sid+"/messages", nil, bearer(key)...)["data"].([]any)
	parts := msgs[len(msgs)-1].(obj)["parts"].([]any)
	if p := parts[len(parts)-1].(obj); p["text"] != "confirmed before the crash" || p["state"] != "interrupted" {
		t.Fatalf("recovered part %v", p)
	}
	model.Enqueue(openaitest.Text("back"))
	next := s2.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("still there?"), bearer(key)...)
	if next["output"].(obj)["text"] != "back" || next["previous_turn_id"] != tid {
		t.Fatalf("next turn %v", next)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
