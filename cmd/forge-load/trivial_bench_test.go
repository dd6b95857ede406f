package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai"
)

// fakeModelArgsEnv carries the fake-model flags to this test binary when
// it runs as spawn's fake model process.
const fakeModelArgsEnv = "FORGE_LOAD_TEST_FAKE_MODEL"

// forgeDir holds the forge binary built for the tests; TestMain removes it.
var forgeDir string

func TestMain(m *testing.M) {
	if args := os.Getenv(fakeModelArgsEnv); args != "" {
		// This test binary, started by spawn as the fake model process.
		err := run(context.Background(), append([]string{"fake-model"}, strings.Fields(args)...), os.Stdout, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	fakeCommand = func(args []string) ([]string, []string, error) {
		return []string{os.Args[0], "-test.run=^$"}, append(os.Environ(), fakeModelArgsEnv+"="+strings.Join(args, " ")), nil
	}
	code := m.Run()
	if forgeDir != "" {
		os.RemoveAll(forgeDir)
	}
	os.Exit(code)
}

// forgeBinary builds cmd/forge once per test binary, the first time a test
// or benchmark needs it.
var forgeBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "forge-load-bench-")
	if err != nil {
		return "", err
	}
	forgeDir = dir
	bin := filepath.Join(dir, "forge")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/forge-runtime/forge/cmd/forge")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	return bin, nil
})

func buildForge(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds and runs a forge serve process")
	}
	bin, err := forgeBinary()
	if err != nil {
		tb.Fatalf("building forge: %v", err)
	}
	return bin
}

// spawnForTest starts forge serve and the fake model server, stopped when
// tb ends.
func spawnForTest(tb testing.TB, extra ...string) *spawned {
	tb.Helper()
	bin := buildForge(tb)
	sp, err := spawn(context.Background(), bin, "instant", false, extra)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := sp.stop(); err != nil {
			tb.Error(err)
		}
	})
	return sp
}

// BenchmarkTrivialTurnLive measures the trivial turn as the issue defines
// it: a real `forge serve` process (built from this tree) over loopback
// HTTP, the agent on openai/<model> behind the openaitest fake (or on
// scripted/echo), wait mode, b.N turns one after the other in one session
// after 5 warm-ups. Beside the turn it reports the floor: as many streamed
// requests to the same fake (the instant one, in a process of its own),
// made from this process, raw (floor-*) and through provider/openai
// (provider-floor-*); the turns' own model requests replayed raw
// (replay-floor-*); and the CPU time forge serve used per turn (from
// /proc, in 10 ms ticks). Run it as the issue does:
//
//	go test -run '^$' -bench TrivialTurnLive -benchtime 100x -count 3 ./cmd/forge-load/
func BenchmarkTrivialTurnLive(b *testing.B) {
	for _, provider := range []string{"openai", "scripted"} {
		b.Run("provider="+provider, func(b *testing.B) {
			sp := spawnForTest(b)
			ctx := context.Background()
			c := common{server: sp.url}
			t, err := c.connect(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			defer t.close()
			const model = "gpt-4.1-mini"
			agent, err := t.createAgentOn(ctx, trivialAgent(provider, model))
			if err != nil {
				b.Fatal(err)
			}
			ids, err := t.createSessions(ctx, agent, 1)
			if err != nil {
				b.Fatal(err)
			}
			body := turnBody("hi", false)
			for range 5 {
				if _, err := t.waitTurn(ctx, ids[0], body); err != nil {
					b.Fatal(err)
				}
			}
			var lat []time.Duration
			cpu0, err := cpuTime(sp.pid)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				d, err := t.waitTurn(ctx, ids[0], body)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, d)
			}
			b.StopTimer()
			cpu1, err := cpuTime(sp.pid)
			if err != nil {
				b.Fatal(err)
			}
			sp.model.RecordRequests(false)
			var replay [][]byte
			if provider == "openai" {
				replay = sp.model.takeBodies()[5:] // the warm-ups' first
			}

			hc := floorClient()
			defer hc.CloseIdleConnections()
			fbody := floorBody(model)
			floor, err := series(ctx, 5, len(lat), func(ctx context.Context) (time.Duration, error) {
				return floorRequest(ctx, hc, sp.modelURL, fbody)
			})
			if err != nil {
				b.Fatal(err)
			}
			pm := openai.New(openai.Config{BaseURL: sp.modelURL, APIKey: spawnKey, HTTPClient: floorClient()}).Model(model)
			pfloor, err := series(ctx, 5, len(lat), func(ctx context.Context) (time.Duration, error) {
				return providerFloorRequest(ctx, pm)
			})
			if err != nil {
				b.Fatal(err)
			}
			reportQuantiles(b, "", lat, 0.50, 0.90, 0.99)
			reportQuantiles(b, "floor-", floor, 0.50, 0.99)
			reportQuantiles(b, "provider-floor-", pfloor, 0.50)
			if len(replay) > 0 {
				i := 0
				rfloor, err := series(ctx, 0, len(replay), func(ctx context.Context) (time.Duration, error) {
					i++
					return floorRequest(ctx, hc, sp.modelURL, replay[i-1])
				})
				if err != nil {
					b.Fatal(err)
				}
				reportQuantiles(b, "replay-floor-", rfloor, 0.50)
			}
			b.ReportMetric(float64(cpu1-cpu0)/float64(len(lat))/float64(time.Microsecond), "server-cpu-µs/turn")
		})
	}
}

// reportQuantiles reports the given quantiles of d in microseconds, as
// "<prefix>p50-µs" and so on.
func reportQuantiles(b *testing.B, prefix string, d []time.Duration, qs ...float64) {
	s := slices.Sorted(slices.Values(d))
	for _, q := range qs {
		name := prefix + "p" + strconv.Itoa(int(math.Round(q*100))) + "-µs"
		b.ReportMetric(float64(percentile(s, q))/float64(time.Microsecond), name)
	}
}
