package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// postAgent posts an agent with one MCP server to the server at url and
// returns the status and the answer.
func postAgent(t *testing.T, url, key, name string, srv map[string]any) (int, string) {
	t.Helper()
	srv["name"] = "m"
	b, _ := json.Marshal(map[string]any{"name": name, "model": "scripted/echo", "mcp_servers": []any{srv}})
	req, _ := http.NewRequest("POST", url+"/v1/agents", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out bytes.Buffer
	_, _ = out.ReadFrom(res.Body)
	return res.StatusCode, out.String()
}

// forge serve decides which addresses agents' MCP url servers may reach:
// without API keys (one tenant, on loopback) private ones, with keys only
// public ones, unless the flag or forge.yaml says otherwise; link-local and
// metadata ones never unless allowed explicitly.
func TestServeMCPURLPolicy(t *testing.T) {
	t.Parallel()
	loopback := map[string]any{"url": "http://127.0.0.1:9/mcp"}
	metadata := map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}
	config := func(body string) func(*serveOptions) {
		path := filepath.Join(t.TempDir(), "forge.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return func(o *serveOptions) { o.config = path }
	}
	no, yes := false, true
	for _, c := range []struct {
		name               string
		opts               []func(*serveOptions)
		key                string
		loopbackOK, metaOK bool
	}{
		{"keyless", nil, "", true, false},
		{"keyless, flag off", []func(*serveOptions){func(o *serveOptions) { o.allowPrivateMCPURLs = &no }}, "", false, false},
		{"keyed", []func(*serveOptions){func(o *serveOptions) { o.apiKeys = "k1=acme" }}, "k1", false, false},
		{"keyed, forge.yaml on", []func(*serveOptions){func(o *serveOptions) { o.apiKeys = "k1=acme" },
			config("mcp:\n  allow_private_urls: true\n")}, "k1", true, false},
		{"keyed, flag wins over forge.yaml", []func(*serveOptions){func(o *serveOptions) { o.apiKeys = "k1=acme"; o.allowPrivateMCPURLs = &no },
			config("mcp:\n  allow_private_urls: true\n")}, "k1", false, false},
		{"link-local flag", []func(*serveOptions){func(o *serveOptions) { o.allowLinkLocalMCPURLs = &yes }}, "", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := startServer(t, c.opts...)
			for _, s := range []struct {
				name string
				srv  map[string]any
				ok   bool
				msg  string
			}{{"loop", loopback, c.loopbackOK, "it is a loopback address"}, {"meta", metadata, c.metaOK, "it is a cloud metadata address"}} {
				status, body := postAgent(t, url, c.key, s.name, map[string]any{"url": s.srv["url"]})
				if s.ok && status != 201 || !s.ok && (status != 400 || !strings.Contains(body, s.msg)) {
					t.Errorf("%s: %d %s", s.name, status, body)
				}
			}
		})
	}
}
