package main

import (
	"strings"
	"testing"

	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestTrivial runs the trivial mode against an in-process server whose
// openai provider points at the openaitest fake, for both providers; the
// turns must reach the fake only for openai.
func TestTrivial(t *testing.T) {
	fake := openaitest.New(t)
	env := map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": spawnKey}
	url := newServerWith(t, provider.FromEnv(func(k string) string { return env[k] }))

	out := runMode(t, "trivial", "--server", url, "--provider", "openai", "--model-url", fake.URL(), "--turns", "4", "--warmup", "1", "--repeat", "2")
	wantLines(t, out, "turn           p50 ", "model floor    p50 ", "provider floor p50 ")
	if !strings.Contains(out, "(8 turns,") {
		t.Errorf("want 8 timed turns:\n%s", out)
	}
	// 10 turns, then 8 raw floor requests + 1 warm-up, then as many through
	// the provider.
	reqs := fake.Requests()
	if len(reqs) != 10+9+9 {
		t.Fatalf("the fake saw %d requests, want 28", len(reqs))
	}
	if got := reqs[0].Model; got != "gpt-4.1-mini" || !reqs[0].Stream {
		t.Errorf("first turn's request: model %q stream %v", got, reqs[0].Stream)
	}
	if n := len(reqs[4].Messages); n != 2+2*4 {
		t.Errorf("the fifth turn of a session sent %d messages, want 10 (system and the history)", n)
	}
	for _, r := range reqs[10:] {
		if len(r.Messages) != 2 || !r.Stream || r.StreamOptions == nil || !r.StreamOptions.IncludeUsage {
			t.Fatalf("floor request: %s", r.Body)
		}
	}

	out = runMode(t, "trivial", "--server", url, "--provider", "scripted", "--turns", "3", "--warmup", "0")
	wantLines(t, out, "turn           p50 ", "model floor    (no --model-url")
	if got := len(fake.Requests()); got != 28 {
		t.Errorf("scripted turns reached the fake: %d requests", got-28)
	}
}

// TestTrivialSpawn runs the mode as documented, with its own forge serve
// process and fake model server (and a profiling listener, whose address
// it prints).
func TestTrivialSpawn(t *testing.T) {
	bin := buildForge(t)
	out := runMode(t, "trivial", "--spawn", "--forge-bin", bin, "--turns", "3", "--warmup", "1",
		"--serve-arg=--pprof-addr=127.0.0.1:0")
	wantLines(t, out, "spawned    forge serve pid ", "pprof listening on http://127.0.0.1:", "turn           p50 ", "model floor    p50 ",
		"provider floor p50 ", "replay floor   p50 ")
	if !strings.Contains(out, "(the 3 model requests of the turns") {
		t.Errorf("want the 3 timed turns' requests replayed:\n%s", out)
	}
	out = runMode(t, "trivial", "--spawn", "--forge-bin", bin, "--fake", "openaitest", "--turns", "2", "--warmup", "0")
	wantLines(t, out, "spawned    forge serve pid ", "turn           p50 ", "replay floor   p50 ")
	out = runMode(t, "trivial", "--spawn", "--forge-bin", bin, "--fake-in-process", "--turns", "2", "--warmup", "0")
	wantLines(t, out, "spawned    forge serve pid ", "turn           p50 ", "replay floor   p50 ")
	if !strings.Contains(out, "in this process") {
		t.Errorf("--fake-in-process: the fake is not said to run in this process:\n%s", out)
	}
	out = runMode(t, "trivial", "--spawn", "--forge-bin", bin, "--provider", "scripted", "--turns", "2", "--warmup", "0")
	wantLines(t, out, "turn           p50 ", "model floor    p50 ")
	if strings.Contains(out, "replay floor") {
		t.Errorf("scripted turns make no model request to replay:\n%s", out)
	}
}
