package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/forge-runtime/forge/internal/testenv"
	"github.com/forge-runtime/forge/redis/redistest"
)

// TestDistributed runs the mode with small counts on the test PostgreSQL
// and two Redis servers of its own (sharded), at 1 and 2 replicas: every
// figure is printed, and the proxies counted round trips and bytes.
func TestDistributed(t *testing.T) {
	pg := testenv.PostgresURL(t)
	_, urls := redistest.Shards(t, 2)
	bin := buildForge(t)
	out := runMode(t, "distributed", "--forge-bin", bin, "--postgres", pg, "--redis", urls, "--replicas", "1,2",
		"--trivial-turns", "6", "--warmup", "1", "--streams", "4", "--deltas", "10", "--pace", "5ms",
		"--throughput-sessions", "4", "--throughput-duration", "300ms")
	wantLines(t, out, "forge-load distributed: ", "== 1 replica (pids ", "== 2 replicas (pids ",
		"trivial turn (wait mode, 6 one after another)  p50 ", "  per trivial turn: Forge CPU ",
		"a 0.05 s stream (10 deltas 5ms apart) at 4 concurrent streams takes ", "  per delta (net of a trivial turn): replica CPU ",
		"throughput at 4 sessions: ", "== paper model: 10000 concurrent streaming turns", "from 1 replica: replicas ", "from 2 replicas: replicas ")
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
		{"--postgres", pg, "--redis", "redis://127.0.0.1:6379/0", "--replicas", "0"},
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
