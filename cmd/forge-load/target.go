package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// common are the flags every mode has.
type common struct {
	server string
	apiKey string
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", "http://127.0.0.1:8080", "base URL of the forge server (loopback only)")
	fs.StringVar(&c.apiKey, "api-key", os.Getenv("FORGE_API_KEY"), "bearer key, when the server has keys (env FORGE_API_KEY)")
}

// target is the server under load.
type target struct {
	base string // scheme://host:port, without /v1
	key  string
	hc   *http.Client // for the measured requests
	api  *client.Client
}

// checkLoopback refuses any server that is not on a loopback address: this
// tool is for measuring a local server, never for loading someone else's.
func checkLoopback(server string) (*url.URL, error) {
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("--server %q: %w", server, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("--server %q: want an http:// or https:// URL", server)
	}
	host := u.Hostname()
	if host == "localhost" {
		return u, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return u, nil
	}
	return nil, fmt.Errorf("--server %q: only loopback servers (127.0.0.0/8, ::1, localhost) are accepted", server)
}

// connect checks the server and returns a target whose HTTP client keeps up
// to conns connections open.
func (c *common) connect(ctx context.Context, conns int) (*target, error) {
	u, err := checkLoopback(c.server)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawQuery, u.Fragment = "", ""
	tr := &http.Transport{
		Proxy:               nil, // never through a proxy: the server is local
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     90 * time.Second,
		// Bounds the wait for an answer's headers (a streamed answer sends
		// them first), not the life of a stream.
		ResponseHeaderTimeout: time.Minute,
		DisableCompression:    true,
	}
	hc := &http.Client{Transport: tr}
	// Setup calls (agents, sessions) go through the client SDK on their own
	// connections, so they never queue behind the measured ones.
	opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: tr.Clone(), Timeout: 30 * time.Second})}
	if c.apiKey != "" {
		opts = append(opts, client.WithAPIKey(c.apiKey))
	}
	api, err := client.New(u.String(), opts...)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := api.Health(hctx); err != nil {
		return nil, fmt.Errorf("server %s is not healthy: %w", u, err)
	}
	return &target{base: strings.TrimSuffix(u.String(), "/"), key: c.apiKey, hc: hc, api: api}, nil
}

func (t *target) close() {
	t.hc.CloseIdleConnections()
}

var agentSeq atomic.Int64

// createAgent creates a fresh scripted/echo agent (playing script when not
// nil) under a name no other run uses, and returns its name.
func (t *target) createAgent(ctx context.Context, script json.RawMessage) (string, error) {
	return t.createAgentOn(ctx, &forge.Agent{Model: "scripted/echo", ModelParams: forge.ModelParams{Script: script}})
}

// createAgentOn creates agent a under a name no other run uses, and
// returns the name.
func (t *target) createAgentOn(ctx context.Context, a *forge.Agent) (string, error) {
	name := fmt.Sprintf("forge-load-%d-%d", time.Now().UnixNano(), agentSeq.Add(1))
	a.Name = name
	if _, err := t.api.CreateAgent(ctx, a); err != nil {
		return "", fmt.Errorf("creating agent: %w", err)
	}
	return name, nil
}

// createSessions opens n sessions with agent, a few at a time.
func (t *target) createSessions(ctx context.Context, agent string, n int) ([]string, error) {
	ids := make([]string, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range ids {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			s, err := t.api.CreateSession(ctx, client.CreateSessionRequest{Agent: agent, Title: "forge-load"})
			if err != nil {
				errs <- fmt.Errorf("creating session: %w", err)
				return
			}
			ids[i] = s.ID
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return ids, nil
}

// request builds a request of the API; body may be nil.
func (t *target) request(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	return req, nil
}

// apiError turns an answer that is not the expected status into an error
// carrying its body's first bytes.
func apiError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%s %s: HTTP %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, bytes.TrimSpace(b))
}

// turnBody is the body of a wait-mode (or, with stream, streamed) turn that
// sends one message.
func turnBody(text string, stream bool) []byte {
	body := map[string]any{"input": []forge.Input{{Type: forge.InputMessage, Text: text}}}
	if stream {
		body["stream"] = true
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
