package engine_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/parts"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// oneModel resolves every name to m; a model id ending in "-text" takes
// text alone, others every kind.
type oneModel struct{ m forge.Model }

func (o oneModel) Resolve(name string) (forge.Model, string, error) {
	_, id, err := forge.SplitModel(name)
	return o.m, id, err
}

func (o oneModel) InputModalities(name string) ([]string, bool) {
	if strings.HasSuffix(name, "-text") {
		return []string{"text"}, true
	}
	return []string{"text", "image", "pdf"}, true
}

var _ engine.InputModalities = oneModel{}

// tinyImage is the PNG server-everything's get-tiny-image returns, read
// from the server's own source.
func tinyImage(t *testing.T) []byte {
	t.Helper()
	bin := everythingServerPath(t)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "..", "@modelcontextprotocol", "server-everything", "dist", "tools", "get-tiny-image.js"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`MCP_TINY_IMAGE = "([A-Za-z0-9+/=]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no MCP_TINY_IMAGE in get-tiny-image.js")
	}
	img, err := base64.StdEncoding.DecodeString(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// neutral is what a fake received, in no API's terms, as JSON.
func neutral(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMCPToolImageReachesEachProvider: the real server-everything's
// get-tiny-image returns text, an image and text; the image is stored as
// a file of the tenant, kept on the tool part (data.files), and every
// provider sends it with the tool's result, byte for byte as the server
// sent it: an image block of Anthropic's tool_result, an input_image of
// the Responses function_call_output, and (a Chat Completions tool
// message holds text alone) an image_url of a user message right after
// the tool message. A model that takes no images is told the tool
// returned one.
func TestMCPToolImageReachesEachProvider(t *testing.T) {
	t.Parallel()
	bin := everythingServer(t)
	img := tinyImage(t)
	b64 := base64.StdEncoding.EncodeToString(img)
	const user = `{"Role":"user","Type":"text","Text":"show me the logo"}`
	text := fmt.Sprintf("Here's the image you requested:\n[image image/png, %d bytes]\nThe image above is the MCP logo.", len(img))
	textOut := fmt.Sprintf(`"Output":"Here's the image you requested:\n[image image/png, %d bytes]\nThe image above is the MCP logo.`, len(img))
	call := `{"Role":"assistant","Type":"tool_call","CallID":"call_1","Name":"everything_get-tiny-image","Arguments":"{}"}`
	inResult := `[` + user + `,` + call + `,{"Role":"tool","Type":"tool_result","CallID":"call_1",` + textOut +
		`","Files":[{"MimeType":"image/png","Data":"` + b64 + `"}]}]`
	cases := []struct {
		name   string
		model  string
		start  func(t *testing.T) (forge.Model, func() []byte)
		want   string
		stored bool
	}{
		{"anthropic", "claude-sonnet-4-5", anthropicFake, inResult, true},
		{"openai-responses", "gpt-5-mini", responsesFake, inResult, true},
		{"openai-chat", "gpt-4.1-mini", chatFake, `[` + user + `,` + call + `,{"Role":"tool","Type":"tool_result","CallID":"call_1",` + textOut +
			`\n[the tool returned the file call_1-1.png (image/png): it follows in the next message]"},` +
			`{"Role":"user","Type":"text","Text":"The files tool call call_1 returned:"},{"Role":"user","Type":"file","Files":[{"MimeType":"image/png","Data":"` + b64 + `"}]}]`, true},
		{"text-only", "claude-sonnet-4-5-text", anthropicFake, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			model, received := tc.start(t)
			m, _ := mcpManager(t)
			h := newHarness(t, func(c *engine.Config) { c.MCP = m; c.Models = oneModel{model} })
			h.agent("a", func(a *forge.Agent) {
				a.Model = "x/" + tc.model
				a.MCPServers = []forge.MCPServer{{Name: "everything", Command: []string{bin, "stdio"}}}
			})
			s := h.session("a")
			turn := h.run(s.ID, msg("show me the logo"))
			if turn.Status != forge.TurnDone || turn.Output.Text != "done" {
				t.Fatalf("turn %+v", turn)
			}
			tool := toolPart(t, h, s.ID, turn.ID)
			if tool.Output == nil || *tool.Output != text {
				t.Fatalf("tool output %v, want the text with the image named where it stood", tool.Output)
			}
			files := parts.ToolOf(tool).Files
			if len(files) != 1 || files[0].MimeType != "image/png" || files[0].Bytes != int64(len(img)) || files[0].Filename != tool.CallID+"-1.png" {
				t.Fatalf("data.files %+v (data %s)", files, tool.Data)
			}
			f, err := h.store.GetFile(h.ctx, forge.DefaultTenant, files[0].FileID)
			if err != nil || f.MimeType != "image/png" || f.Width != 20 || f.Height != 20 {
				t.Fatalf("stored file %+v, %v", f, err)
			}
			rc, err := h.store.FileContent(h.ctx, forge.DefaultTenant, f.ID)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(got, img) {
				t.Fatal("the stored file is not the server's image")
			}
			// The engine names calls itself: call_1 stands for its id.
			sent := strings.ReplaceAll(string(received()), tool.CallID, "call_1")
			if tc.want == "" {
				// A text-only model: the result's text, then a note.
				want := `[` + user + `,` + call + `,{"Role":"tool","Type":"tool_result","CallID":"call_1",` + textOut +
					`[The tool returned the image call_1-1.png (image/png, file ` + f.ID + `); this model does not take images.]"}]`
				if sent != want {
					t.Fatalf("sent to a text-only model\n%s\nwant\n%s", sent, want)
				}
				return
			}
			if sent != tc.want {
				t.Fatalf("the second call sent\n%s\nwant\n%s", sent, tc.want)
			}
		})
	}
}

// toolPart is the one tool part of a turn.
func toolPart(t *testing.T, h *harness, sid, tid string) *forge.Part {
	t.Helper()
	msgs, _, err := h.store.ListMessages(h.ctx, forge.DefaultTenant, forge.MessageQuery{SessionID: sid, TipTurnID: tid})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == forge.PartTool {
				return p
			}
		}
	}
	t.Fatal("no tool part")
	return nil
}

// The fakes answer a call of get-tiny-image, then "done"; received is the
// neutral form of the second request's parts.
func anthropicFake(t *testing.T) (forge.Model, func() []byte) {
	srv := anthropictest.New(t)
	srv.Enqueue(anthropictest.ToolUse(anthropictest.Call{ID: "call_1", Name: "everything_get-tiny-image", Input: "{}"}), anthropictest.Text("done"))
	m := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: srv.URL()}).Model("")
	return m, func() []byte {
		reqs := srv.Requests()
		if len(reqs) != 2 {
			t.Fatalf("%d requests", len(reqs))
		}
		return []byte(neutral(t, reqs[1].Neutral().Parts))
	}
}

func responsesFake(t *testing.T) (forge.Model, func() []byte) {
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.ToolCalls(openaitest.Call{ID: "call_1", Name: "everything_get-tiny-image", Args: "{}"}), openaitest.Text("done"))
	m := openai.NewResponses(openai.Config{APIKey: "k", BaseURL: srv.URL()}).Model("")
	return m, func() []byte {
		reqs := srv.ResponsesRequests()
		if len(reqs) != 2 {
			t.Fatalf("%d requests", len(reqs))
		}
		return []byte(neutral(t, reqs[1].Neutral().Parts))
	}
}

func chatFake(t *testing.T) (forge.Model, func() []byte) {
	srv := openaitest.New(t)
	srv.Enqueue(openaitest.ToolCalls(openaitest.Call{ID: "call_1", Name: "everything_get-tiny-image", Args: "{}"}), openaitest.Text("done"))
	m := openai.New(openai.Config{APIKey: "k", BaseURL: srv.URL()}).Model("")
	return m, func() []byte {
		reqs := srv.Requests()
		if len(reqs) != 2 {
			t.Fatalf("%d requests", len(reqs))
		}
		return []byte(neutral(t, reqs[1].Neutral().Parts))
	}
}

// TestToolImageNotKeptIsNamedInTheOutput: an image a tool returns that
// Forge does not take as a file (content that is no image it knows) is not
// stored; the output names it, and the model is shown that.
func TestToolImageNotKeptIsNamedInTheOutput(t *testing.T) {
	t.Parallel()
	srv := sdk.NewServer(&sdk.Implementation{Name: "pics", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "snap", Description: "Take a picture"},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "snapped"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte("not a png at all")}}}, nil, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	m, _ := mcpManager(t)
	h := newHarness(t, func(c *engine.Config) { c.MCP = m })
	h.agent("a", func(a *forge.Agent) { a.MCPServers = []forge.MCPServer{{Name: "pics", URL: ts.URL}} })
	s := h.session("a")
	h.model.push(reply{calls: []forge.ToolCall{call("pics_snap", `{}`)}}, reply{deltas: []string{"done"}})
	turn := h.run(s.ID, msg("snap"))
	if turn.Status != forge.TurnDone {
		t.Fatalf("turn %+v", turn)
	}
	tool := toolPart(t, h, s.ID, turn.ID)
	if tool.Output == nil || !strings.HasPrefix(*tool.Output, "snapped\n[image image/png, 16 bytes]\n[image/png file of 16 bytes returned by the tool, not kept: ") || len(tool.Data) != 0 {
		t.Fatalf("tool part output %v, data %s", tool.Output, tool.Data)
	}
	res := h.model.sent()[1].Messages[2].Parts[0]
	if res.Output != *tool.Output || len(res.Content) != 0 {
		t.Fatalf("result sent %+v", res)
	}
}

// TestToolImageOverTheFileLimitIsNotKept: a tool's image is held to the
// server's file limit (Config.MaxFileBytes, --max-file-bytes) like an
// upload: over it, nothing is stored and the output says so.
func TestToolImageOverTheFileLimitIsNotKept(t *testing.T) {
	t.Parallel()
	// A 1x1 PNG: valid, 70 bytes.
	dot, _ := base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
	srv := sdk.NewServer(&sdk.Implementation{Name: "pics", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "snap", Description: "Take a picture"},
		func(ctx context.Context, req *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.ImageContent{MIMEType: "image/png", Data: dot}}}, nil, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	m, _ := mcpManager(t)
	for _, limit := range []int64{int64(len(dot)) - 1, int64(len(dot))} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			h := newHarness(t, func(c *engine.Config) { c.MCP, c.MaxFileBytes = m, limit })
			h.agent("a", func(a *forge.Agent) { a.MCPServers = []forge.MCPServer{{Name: "pics", URL: ts.URL}} })
			s := h.session("a")
			h.model.push(reply{calls: []forge.ToolCall{call("pics_snap", `{}`)}}, reply{deltas: []string{"done"}})
			turn := h.run(s.ID, msg("snap"))
			tool := toolPart(t, h, s.ID, turn.ID)
			kept := len(parts.ToolOf(tool).Files)
			stored, _, err := h.store.ListFiles(h.ctx, forge.DefaultTenant, forge.ListOptions{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if limit < int64(len(dot)) {
				if kept != 0 || len(stored) != 0 || tool.Output == nil || !strings.Contains(*tool.Output, "not kept") {
					t.Fatalf("over the limit: %d kept, %d stored, output %v", kept, len(stored), tool.Output)
				}
				return
			}
			if kept != 1 || len(stored) != 1 {
				t.Fatalf("at the limit: %d kept, %d stored", kept, len(stored))
			}
		})
	}
}
