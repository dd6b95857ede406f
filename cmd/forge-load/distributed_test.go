package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/internal/testenv"
	"github.com/forge-runtime/forge/redis/redistest"
)

// TestDistributed runs the mode with small counts on the test PostgreSQL
// and two Redis servers of its own (sharded), at a single SQLite node, 1
// and 2 replicas: every figure is printed, the proxies counted round trips
// and bytes, and the CPU profiles were written.
func TestDistributed(t *testing.T) {
	pg := testenv.PostgresURL(t)
	_, urls := redistest.Shards(t, 2)
	bin := buildForge(t)
	profiles := t.TempDir()
	out := runMode(t, "distributed", "--forge-bin", bin, "--postgres", pg, "--redis", urls, "--replicas", "0,1,2", "--cpu-profiles", profiles,
		"--trivial-turns", "6", "--warmup", "1", "--streams", "4", "--deltas", "10", "--pace", "5ms",
		"--throughput-sessions", "4", "--throughput-duration", "300ms")
	wantLines(t, out, "forge-load distributed: ", "== a single node on SQLite (pid ", "== 1 replica (pids ", "== 2 replicas (pids ",
		"trivial turn (wait mode, 6 one after another)  p50 ", "  per trivial turn: Forge CPU ",
		"trivial turn on the next replica each time (one session, no affinity, 3 turns)  p50 ",
		"a 0.05 s stream (10 deltas 5ms apart) at 4 concurrent streams takes ", "  per delta (net of a trivial turn): replica CPU ",
		"throughput at 4 sessions: ", "== paper model: 10000 concurrent streaming turns", "a single node would need ",
		"from 1 replica: replicas ", "from 2 replicas: replicas ", "== side by side", "Forge CPU per streamed delta  ")
	for _, name := range []string{"replicas-1-0.pprof", "replicas-2-0.pprof", "replicas-2-1.pprof"} {
		if fi, err := os.Stat(filepath.Join(profiles, name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v (size %v)", name, err, fi)
		}
	}
	if strings.Contains(out, " 0.0 round trips") {
		t.Errorf("a proxy counted no round trips:\n%s", out)
	}
}

func TestDistributedRefusals(t *testing.T) {
	t.Parallel()
	pg := "postgres://postgres@127.0.0.1:5432/x"
	for _, args := range [][]string{
		{"--redis", "redis://127.0.0.1:6379/0"}, // no --postgres (the env is cleared below)
		{"--postgres", pg},
		{"--postgres", "postgres://postgres@db.example.com:5432/x", "--redis", "redis://127.0.0.1:6379/0"},
		{"--postgres", pg, "--redis", "redis://10.0.0.1:6379/0"},
		{"--postgres", pg, "--redis", "redis://127.0.0.1:6379/0,redis://127.0.0.1:6379/0"},
		{"--postgres", pg, "--redis", "http://127.0.0.1:6379/0"},
		{"--postgres", pg, "--redis", "redis://127.0.0.1:6379/0", "--replicas", "-1"},
		{"--postgres", pg, "--redis", "redis://127.0.0.1:6379/0", "--replicas", "17"},
		{"--postgres", pg, "--redis", "redis://127.0.0.1:6379/0", "--streams", "0"},
		{"--postgres", pg, "--redis", "redis://127.0.0.1:6379/0", "--throughput-duration", "1ms"},
	} {
		var out, errOut bytes.Buffer
		full := append([]string{"distributed", "--postgres", "", "--redis", ""}, args...)
		if err := run(context.Background(), full, &out, &errOut); err == nil {
			t.Errorf("forge-load distributed %q: no error", args)
		}
	}
}
