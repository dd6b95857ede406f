package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/openai"
)

// The trivial turn: one session, wait-mode turns one after the other, each
// a one-word message answered at once by the model, measured from sending
// the request to having read the whole answer. Beside it, the floor: one
// streamed request to the same model server, made from this process and
// measured the same way, so that what the figures show above the floor is
// Forge's own cost.

// trivialAgent is the agent every trivial turn runs with.
func trivialAgent(provider, model string) *forge.Agent {
	a := &forge.Agent{Instructions: "be brief", Model: "scripted/echo"}
	if provider == "openai" {
		a.Model = "openai/" + model
	}
	return a
}

// floorBody is the body provider/openai sends for the first trivial turn
// (the system instructions and the message "hi").
func floorBody(model string) []byte {
	return fmt.Appendf(nil, `{"messages":[{"content":"be brief","role":"system"},{"content":"hi","role":"user"}],`+
		`"model":%q,"stream_options":{"include_usage":true},"stream":true}`, model)
}

// floorClient is an HTTP client for the model server alone, set up as the
// one measuring turns.
func floorClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   4,
		ResponseHeaderTimeout: time.Minute,
		DisableCompression:    true,
	}}
}

// floorRequest makes one streamed Chat Completions request to modelURL
// (ending in /v1) and reads its answer to the end; it returns the time
// from sending it to the last byte.
func floorRequest(ctx context.Context, hc *http.Client, modelURL string, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, modelURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+spawnKey)
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, apiError(resp)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("the model server sent an empty answer")
	}
	return d, nil
}

// providerFloorRequest makes the same model call through provider/openai
// in this process, and returns its duration.
func providerFloorRequest(ctx context.Context, m forge.Model) (time.Duration, error) {
	req := &forge.ModelRequest{System: "be brief", Messages: []forge.ModelMessage{
		{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "hi"}}},
	}}
	start := time.Now()
	finished := false
	for ev, err := range m.Stream(ctx, req) {
		if err != nil {
			return 0, err
		}
		finished = finished || ev.Type == forge.FinishEvent
	}
	d := time.Since(start)
	if !finished {
		return 0, fmt.Errorf("the model call ended without a finish event")
	}
	return d, nil
}

// series runs warmup untimed calls of fn, then n timed ones, and returns
// their durations.
func series(ctx context.Context, warmup, n int, fn func(context.Context) (time.Duration, error)) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := range warmup + n {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		d, err := fn(ctx)
		if err != nil {
			return out, err
		}
		if i >= warmup {
			out = append(out, d)
		}
	}
	return out, nil
}

// quantiles formats p50, p90, p99 and the maximum of durations.
func quantiles(d []time.Duration) string {
	s := slices.Sorted(slices.Values(d))
	if len(s) == 0 {
		return "(none)"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s",
		ms(percentile(s, 0.50)), ms(percentile(s, 0.90)), ms(percentile(s, 0.99)), ms(s[len(s)-1]))
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runTrivial(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("trivial", flag.ContinueOnError)
	var c common
	c.register(fs)
	provider := fs.String("provider", "openai", "the agent's model: openai (openai/<--model>, served by the model server) or scripted (scripted/echo, in the server)")
	model := fs.String("model", "gpt-4.1-mini", "the model id the agent names on openai")
	modelURL := fs.String("model-url", "", "base URL (ending in /v1) of the model server the forge server's OPENAI_BASE_URL points at, for the floor (loopback only; set by --spawn)")
	turns := fs.Int("turns", 100, "timed turns per session (1..100000)")
	warmup := fs.Int("warmup", 5, "untimed turns at the start of each session (0..1000)")
	repeat := fs.Int("repeat", 1, "sessions to run one after the other, each with its warm-ups and timed turns (1..10000); the figures pool them")
	doSpawn := fs.Bool("spawn", false, "start a forge serve (on a fresh database in a temporary directory) and a fake OpenAI server (--fake, in this process), and stop them at the end; --server and --model-url are then ignored")
	fake := fs.String("fake", "instant", "the model server --spawn starts: instant (writes openaitest's SSE bytes without decoding the request) or openaitest (decodes and validates it)")
	inProcess := fs.Bool("fake-in-process", false, "run the fake model server in this process rather than in a process of its own (forge's model calls and the floor then cross different process boundaries)")
	forgeBin := fs.String("forge-bin", "", "the forge binary --spawn runs (default: forge next to forge-load, else on $PATH)")
	var serveArgs stringList
	fs.Var(&serveArgs, "serve-arg", "a flag for the spawned forge serve, e.g. --serve-arg=--pprof-addr=127.0.0.1:6060 (repeatable)")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	switch {
	case *provider != "openai" && *provider != "scripted":
		return fmt.Errorf("--provider must be openai or scripted")
	case *turns < 1 || *turns > 100_000:
		return fmt.Errorf("--turns must be 1..100000")
	case *warmup < 0 || *warmup > 1000:
		return fmt.Errorf("--warmup must be 0..1000")
	case *repeat < 1 || *repeat > 10_000:
		return fmt.Errorf("--repeat must be 1..10000")
	case *fake != "instant" && *fake != "openaitest":
		return fmt.Errorf("--fake must be instant or openaitest")
	case *model == "" || strings.ContainsAny(*model, "/ "):
		return fmt.Errorf("--model must be a model id without '/' or spaces")
	case !*doSpawn && *provider == "openai" && *modelURL == "":
		return fmt.Errorf("--provider openai needs --model-url (the server's OPENAI_BASE_URL), or --spawn")
	}
	if !*doSpawn && *modelURL != "" {
		if _, err := checkLoopback(*modelURL); err != nil {
			return fmt.Errorf("--model-url: %w", err)
		}
	}

	var sp *spawned
	if *doSpawn {
		bin, err := findForge(*forgeBin)
		if err != nil {
			return err
		}
		sp, err = spawn(ctx, bin, *fake, *inProcess, serveArgs)
		if err != nil {
			return err
		}
		defer func() {
			if err := sp.stop(); err != nil {
				fmt.Fprintln(errOut, "forge-load trivial:", err)
			}
		}()
		c.server, c.apiKey, *modelURL = sp.url, "", sp.modelURL
		where := "its own process"
		if *inProcess {
			where = "this process"
		}
		fmt.Fprintf(out, "spawned    forge serve pid %d on %s; fake model server (%s, in %s) %s\n", sp.pid, sp.url, *fake, where, sp.modelURL)
		if l := strings.TrimSpace(sp.logs.String()); l != "" {
			fmt.Fprintln(out, l)
		}
	}
	t, err := c.connect(ctx, 1)
	if err != nil {
		return err
	}
	defer t.close()
	agent, err := t.createAgentOn(ctx, trivialAgent(*provider, *model))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "forge-load trivial: server %s, model %s, %d session(s) of %d timed turns after %d warm-ups, wait mode\n",
		t.base, trivialAgent(*provider, *model).Model, *repeat, *turns, *warmup)

	// Every request gets a hard bound.
	reqCtx, cancel := context.WithTimeout(ctx, time.Duration(*repeat)*time.Duration(*turns+*warmup)*10*time.Second)
	defer cancel()
	body := turnBody("hi", false)
	var lat []time.Duration
	var cpu0 time.Duration
	if sp != nil {
		cpu0, _ = cpuTime(sp.pid)
	}
	start := time.Now()
	for range *repeat {
		ids, err := t.createSessions(reqCtx, agent, 1)
		if err != nil {
			return err
		}
		l, err := series(reqCtx, *warmup, *turns, func(ctx context.Context) (time.Duration, error) {
			return t.waitTurn(ctx, ids[0], body)
		})
		if err != nil {
			return fmt.Errorf("turn %d of session %s: %w", len(l)+*warmup+1, ids[0], err)
		}
		lat = append(lat, l...)
	}
	elapsed := time.Since(start)
	var replay [][]byte // the timed turns' model requests
	if sp != nil {
		sp.model.RecordRequests(false)
		if *provider == "openai" {
			all := sp.model.takeBodies()
			for i, b := range all {
				if i%(*warmup+*turns) >= *warmup {
					replay = append(replay, b)
				}
			}
		}
	}
	fmt.Fprintf(out, "turn           %s  (%d turns, %.1f turns/s)\n", quantiles(lat), len(lat), float64(len(lat)+*repeat**warmup)/elapsed.Seconds())
	if sp != nil {
		// Warm-ups and session creation included: all the server did.
		if cpu1, err := cpuTime(sp.pid); err == nil {
			all := len(lat) + *repeat**warmup
			fmt.Fprintf(out, "server CPU     %s per turn  (user+system of forge serve over the %d turns, from /proc; 10 ms ticks)\n", ms((cpu1-cpu0)/time.Duration(all)), all)
		}
	}

	if *modelURL == "" {
		fmt.Fprintln(out, "model floor    (no --model-url: not measured)")
		return nil
	}
	hc := floorClient()
	defer hc.CloseIdleConnections()
	fbody := floorBody(*model)
	floor, err := series(reqCtx, *warmup, len(lat), func(ctx context.Context) (time.Duration, error) {
		return floorRequest(ctx, hc, *modelURL, fbody)
	})
	if err != nil {
		return fmt.Errorf("floor request: %w", err)
	}
	fmt.Fprintf(out, "model floor    %s  (one streamed request to the model server, raw HTTP)\n", quantiles(floor))
	pm := openai.New(openai.Config{BaseURL: *modelURL, APIKey: spawnKey, HTTPClient: floorClient()}).Model(*model)
	pfloor, err := series(reqCtx, *warmup, len(lat), func(ctx context.Context) (time.Duration, error) {
		return providerFloorRequest(ctx, pm)
	})
	if err != nil {
		return fmt.Errorf("provider floor request: %w", err)
	}
	fmt.Fprintf(out, "provider floor %s  (the same call through provider/openai, in this process)\n", quantiles(pfloor))
	if len(replay) > 0 {
		i := 0
		rfloor, err := series(reqCtx, 0, len(replay), func(ctx context.Context) (time.Duration, error) {
			i++
			return floorRequest(ctx, hc, *modelURL, replay[i-1])
		})
		if err != nil {
			return fmt.Errorf("replayed request: %w", err)
		}
		fmt.Fprintf(out, "replay floor   %s  (the %d model requests of the turns, replayed to the model server, raw HTTP)\n", quantiles(rfloor), len(rfloor))
	}
	return nil
}
