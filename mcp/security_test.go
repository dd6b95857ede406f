package mcp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	forge "github.com/forge-runtime/forge"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tenant's hostile stdio command runs confined: it cannot read the
// environment of the server or of any host process, a host file, or write
// one outside its sandbox. What it wrote stays in the session's working
// directory.
func TestHostileStdioCommandIsConfined(t *testing.T) {
	const secret = "sk-hostile-probe-7f3a91"
	t.Setenv("FORGE_HOSTILE_SECRET", secret)
	t.Setenv("FORGE_API_KEYS", "key-of-tenant-a="+secret)
	// /proc/<pid>/environ shows a process's initial environment, which
	// t.Setenv does not change: a host process started with the secrets
	// stands for the server (e2e covers forge serve itself).
	holder := exec.Command("sleep", "300")
	holder.Env = append(os.Environ(), "FORGE_API_KEYS=key-of-tenant-a="+secret, "OPENAI_API_KEY="+secret)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	hostDir := t.TempDir()
	hostFile := filepath.Join(hostDir, "forge.db")
	if err := os.WriteFile(hostFile, []byte("database rows "+secret), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(hostDir, "planted")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `cat /proc/$PPID/environ > leak-parent 2>&1
cat /proc/1/environ > leak-init 2>&1
cat /proc/$4/environ > leak-holder 2>&1
for p in /proc/[0-9]*; do cat $p/environ; done > leak-all 2>&1
env > env.txt; id > id.txt; ls / > root.txt
cat "$1" > db.txt 2>&1
echo pwned > "$2" 2>err.txt
ls -la "$3" > self.txt 2>&1
exec "$0" stdio`
	spec := everything(t)
	spec.Command = []string{"sh", "-c", script, spec.Command[0], hostFile, planted, self, strconv.Itoa(holder.Process.Pid)}
	m := sandboxed(t, Options{})
	if _, _, err := m.Tools(ctx30(t), "ses_hostile", []forge.MCPServer{spec}); err != nil {
		t.Fatal(err) // the script ran to its end: the server started after it
	}
	dir := workDir(t, m, "ses_hostile")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("the command wrote no %s in its sandbox: %v", name, err)
		}
		return string(b)
	}
	for _, name := range []string{"leak-parent", "leak-init", "leak-holder", "leak-all", "env.txt", "db.txt"} {
		if got := read(name); strings.Contains(got, secret) || strings.Contains(got, "FORGE_API_KEYS") {
			t.Errorf("%s shows the server's secrets:\n%s", name, got)
		}
	}
	if got := read("env.txt"); !strings.Contains(got, "HOME="+filepath.Join(filepath.Dir(dir), "home")) {
		t.Errorf("env.txt is not the sandbox's environment:\n%s", got)
	}
	if got := read("db.txt"); !strings.Contains(got, "No such file or directory") {
		t.Errorf("reading the host file: %q", got)
	}
	if got := read("self.txt"); !strings.Contains(got, "No such file or directory") {
		t.Errorf("the test binary on the host is visible: %q", got)
	}
	if _, err := os.Stat(planted); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command wrote a host file: %v (%s)", err, read("err.txt"))
	}
	t.Logf("id in the sandbox: %s", strings.TrimSpace(read("id.txt")))
}

// Without process isolation a tenant's stdio command is refused, before
// anything runs, with a reason the agent's author can act on;
// UnsafeUnsandboxedCommands (forge serve --unsafe-unsandboxed-commands) does
// not change that.
func TestStdioRefusedWithoutIsolation(t *testing.T) {
	t.Parallel()
	planted := filepath.Join(t.TempDir(), "planted")
	spec := forge.MCPServer{Name: "evil", Command: []string{"sh", "-c", `echo pwned > "$0"`, planted}}
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"no isolation", Options{Launcher: unisolated(t)}, "no process isolation"},
		{"no launcher", Options{}, "runs no stdio MCP servers but those its operator allows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newManager(t, c.opts)
			err := m.CheckServer(context.Background(), spec)
			if !errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckServer = %v", err)
			}
			_, _, err = m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
			if err == nil || !strings.Contains(err.Error(), `MCP server "evil" is not running: `) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Tools = %v", err)
			}
			if c.name == "no isolation" && !strings.Contains(err.Error(), "--unsafe-unsandboxed-commands does not apply") {
				t.Errorf("the error does not say the unsafe flag does not apply: %v", err)
			}
			if _, err := os.Stat(planted); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the command ran: %v", err)
			}
		})
	}
}

// The variables an agent declares reach the program in the sandbox, never
// bubblewrap's own environment (where LD_PRELOAD would run on the host) nor
// its command line (which every host user can read).
func TestDeclaredEnvOnlyInsideTheSandbox(t *testing.T) {
	t.Parallel()
	const value = "declared-value-5d1e"
	spec := everything(t)
	spec.Env = map[string]string{"FORGE_DECLARED": value}
	m := sandboxed(t, Options{})
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, find(t, tools, "everything_get-env"), `{}`); !strings.Contains(res.Output, value) {
		t.Fatalf("the program lacks the variable: %s", res.Output)
	}
	pid := m.ServerPID("ses_1", "everything")
	for _, f := range []string{"environ", "cmdline"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), value) || strings.Contains(string(b), "FORGE_DECLARED") {
			t.Errorf("bubblewrap's %s (on the host) holds the declared variable: %q", f, b)
		}
	}
	if n, _ := os.ReadDir("/proc/" + strconv.Itoa(os.Getpid()) + "/fd"); len(n) > 200 {
		t.Errorf("%d open files: the env files leak", len(n))
	}
}

// The operator's allowlist: an entry marked Host runs on the host (even
// without isolation) with the operator's environment, and takes only the
// variables and the arguments the entry allows; an entry without Host runs
// sandboxed; with OnlyAllowedCommands other commands are refused.
func TestOperatorCommands(t *testing.T) {
	t.Setenv("FORGE_OPERATOR_PROCESS_SECRET", "host-secret-0c4b")
	bin := everything(t).Command[0]
	hostEntry := AllowedCommand{Name: "everything-host", Command: []string{bin, "stdio"}, Host: true,
		Env: map[string]string{"FORGE_OPERATOR_TOKEN": "op-token"}, TenantEnv: []string{"FORGE_LOG_LEVEL"}, Dir: t.TempDir()}
	m := newManager(t, Options{Launcher: unisolated(t), Commands: []AllowedCommand{hostEntry}})
	ctx := context.Background()

	ok := forge.MCPServer{Name: "everything", Command: []string{bin, "stdio"}, Env: map[string]string{"FORGE_LOG_LEVEL": "debug"}}
	if err := m.CheckServer(ctx, ok); err != nil {
		t.Fatalf("allowed command: %v", err)
	}
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{ok})
	if err != nil {
		t.Fatal(err)
	}
	env := call(t, find(t, tools, "everything_get-env"), `{}`).Output
	if !strings.Contains(env, `"FORGE_OPERATOR_TOKEN": "op-token"`) || !strings.Contains(env, `"FORGE_LOG_LEVEL": "debug"`) ||
		strings.Contains(env, "host-secret-0c4b") {
		t.Errorf("host command's environment: %s", env)
	}
	if cwd, err := os.Readlink("/proc/" + strconv.Itoa(m.ServerPID("ses_1", "everything")) + "/cwd"); err != nil || cwd != hostEntry.Dir {
		t.Errorf("host command runs in %q (%v), want %s", cwd, err, hostEntry.Dir)
	}

	for _, c := range []struct {
		name string
		spec forge.MCPServer
		want string
	}{
		{"undeclared variable", forge.MCPServer{Name: "x", Command: []string{bin, "stdio"}, Env: map[string]string{"LD_PRELOAD": "/tmp/evil.so"}},
			"env LD_PRELOAD: the operator's command \"everything-host\" runs on the host and takes only the variables it lists (FORGE_LOG_LEVEL)"},
		{"extra argument", forge.MCPServer{Name: "x", Command: []string{bin, "stdio", "--evil"}}, "no process isolation"},
		{"other program", forge.MCPServer{Name: "x", Command: []string{"sh", "-c", "id"}}, "no process isolation"},
	} {
		if err := m.CheckServer(ctx, c.spec); !errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: CheckServer = %v, want %q", c.name, err, c.want)
		}
	}

	// A prefix entry takes more arguments.
	prefix := hostEntry
	prefix.Command, prefix.Prefix = []string{bin}, true
	mp := newManager(t, Options{Launcher: unisolated(t), Commands: []AllowedCommand{prefix}})
	if err := mp.CheckServer(ctx, forge.MCPServer{Name: "x", Command: []string{bin, "stdio"}}); err != nil {
		t.Errorf("prefix entry: %v", err)
	}

	// Sandboxed entries, and nothing else.
	sandboxedEntry := AllowedCommand{Name: "everything", Command: []string{bin, "stdio"},
		Env: map[string]string{"FORGE_OPERATOR_TOKEN": "op-token-2"}}
	ms := sandboxed(t, Options{Commands: []AllowedCommand{sandboxedEntry}, OnlyAllowedCommands: true})
	if err := ms.CheckServer(ctx, forge.MCPServer{Name: "x", Command: []string{"sh", "-c", "id"}}); !errors.Is(err, forge.ErrInvalid) ||
		!strings.Contains(err.Error(), "runs only the stdio MCP servers its operator allows (forge.yaml mcp.commands): everything ("+bin+" stdio)") {
		t.Errorf("other command: %v", err)
	}
	spec := forge.MCPServer{Name: "everything", Command: []string{bin, "stdio"}, Env: map[string]string{"FORGE_OPERATOR_TOKEN": "tenant-choice", "ANY": "1"}}
	tools, _, err = ms.Tools(ctx30(t), "ses_2", []forge.MCPServer{spec})
	if err != nil {
		t.Fatal(err)
	}
	env = call(t, find(t, tools, "everything_get-env"), `{}`).Output
	home := filepath.Join(filepath.Dir(workDir(t, ms, "ses_2")), "home")
	if !strings.Contains(env, `"FORGE_OPERATOR_TOKEN": "op-token-2"`) || !strings.Contains(env, `"ANY": "1"`) || !strings.Contains(env, `"HOME": "`+home+`"`) {
		t.Errorf("sandboxed operator command's environment (the operator's variables win): %s", env)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr  string
		class addrClass
		kind  string
	}{
		{"127.0.0.1", classPrivate, "loopback"},
		{"127.8.9.10", classPrivate, "loopback"},
		{"::1", classPrivate, "loopback"},
		{"::ffff:127.0.0.1", classPrivate, "loopback"},
		{"0.0.0.0", classPrivate, "unspecified"},
		{"0.1.2.3", classPrivate, "unspecified"},
		{"::", classPrivate, "unspecified"},
		{"10.0.0.1", classPrivate, "private"},
		{"172.16.5.4", classPrivate, "private"},
		{"192.168.1.1", classPrivate, "private"},
		{"fd12:3456::1", classPrivate, "private"},
		{"100.64.0.1", classPrivate, "shared (carrier-grade NAT)"},
		{"198.18.0.1", classPrivate, "private (benchmarking)"},
		{"169.254.169.254", classLinkLocal, "cloud metadata"},
		{"169.254.170.2", classLinkLocal, "cloud metadata"},
		{"fd00:ec2::254", classLinkLocal, "cloud metadata"},
		{"100.100.100.200", classLinkLocal, "cloud metadata"},
		{"168.63.129.16", classLinkLocal, "cloud metadata"},
		{"169.254.1.2", classLinkLocal, "link-local"},
		{"fe80::1", classLinkLocal, "link-local"},
		{"fe80::1%eth0", classLinkLocal, "link-local"},
		{"224.0.0.1", classNever, "multicast"},
		{"ff02::1", classNever, "multicast"},
		{"255.255.255.255", classNever, "broadcast"},
		{"240.0.0.1", classNever, "reserved"},
		{"64:ff9b::a00:1", classPrivate, "private (embedded in 64:ff9b::a00:1)"},
		{"64:ff9b::a9fe:a9fe", classLinkLocal, "cloud metadata (embedded in 64:ff9b::a9fe:a9fe)"},
		{"2002:7f00:1::", classPrivate, "loopback (embedded in 2002:7f00:1::)"},
		{"8.8.8.8", classPublic, ""},
		{"2606:4700::1111", classPublic, ""},
		{"172.32.0.1", classPublic, ""},
	} {
		got, kind := classify(netip.MustParseAddr(c.addr))
		if got != c.class || kind != c.kind {
			t.Errorf("classify(%s) = %d %q, want %d %q", c.addr, got, kind, c.class, c.kind)
		}
	}
}

// At agent creation: a URL naming a refused address, by literal or by a
// name that means this machine, is invalid; other names are checked when
// dialed (no DNS lookup at creation).
func TestCheckServerURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyless := atomic.Bool{}
	cases := []struct {
		url              string
		want             string // refusal by default; "" when allowed
		private, linkLoc bool   // allowed by AllowPrivate, AllowLinkLocal
	}{
		{"http://127.0.0.1:8080/mcp", "127.0.0.1:8080 was refused: it is a loopback address", true, false},
		{"http://[::1]/mcp", "[::1] was refused: it is a loopback address", true, false},
		{"http://localhost:3000/", "localhost:3000 was refused: it is a loopback address", true, false},
		{"http://api.localhost/", "api.localhost was refused: it is a loopback address", true, false},
		{"http://10.1.2.3/", "10.1.2.3 was refused: it is a private address", true, false},
		{"http://[::ffff:192.168.0.1]/", "it is a private address", true, false},
		{"http://100.64.1.1/", "it is a shared (carrier-grade NAT) address", true, false},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 was refused: it is a cloud metadata address", false, true},
		{"http://[fd00:ec2::254]/", "it is a cloud metadata address", false, true},
		{"http://metadata.google.internal/computeMetadata/v1/", "it is a cloud metadata address", false, true},
		{"http://[fe80::1%25eth0]:80/", "it is a link-local address", false, true},
		{"http://224.0.0.1/", "it is a multicast address", false, false},
		{"https://mcp.example.com/mcp", "", true, true},
		{"https://93.184.215.14/mcp", "", true, true},
		{"ftp://example.com/", "url must be an absolute http or https URL", false, false},
	}
	for _, c := range cases {
		for _, p := range []struct {
			name    string
			policy  NetworkPolicy
			allowed bool
		}{
			{"default", NetworkPolicy{}, c.want == ""},
			{"private", NetworkPolicy{AllowPrivate: true}, c.want == "" || c.private},
			{"keyless", NetworkPolicy{PrivateAllowed: func(context.Context) bool { return keyless.Load() }}, c.want == "" || c.private},
			{"link-local", NetworkPolicy{AllowLinkLocal: true}, c.want == "" || c.linkLoc},
		} {
			keyless.Store(true)
			m := NewManager(Options{Network: p.policy})
			err := m.CheckServer(ctx, forge.MCPServer{Name: "s", URL: c.url})
			if p.allowed != (err == nil) {
				t.Errorf("%s with policy %s: err = %v, want allowed %v", c.url, p.name, err, p.allowed)
				continue
			}
			if err != nil && (!errors.Is(err, forge.ErrInvalid) || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s with policy %s: err = %v, want it to contain %q", c.url, p.name, err, c.want)
			}
		}
	}
	// Keys appear: the keyless allowance ends.
	keyless.Store(false)
	m := NewManager(Options{Network: NetworkPolicy{PrivateAllowed: func(context.Context) bool { return keyless.Load() }}})
	if err := m.CheckServer(ctx, forge.MCPServer{Name: "s", URL: "http://127.0.0.1/"}); err == nil {
		t.Error("keyed: loopback allowed")
	}
}

// plainServer serves an MCP server with one tool, echo, and counts the
// requests that carried header X-Secret.
func plainServer(t *testing.T, sawSecret *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := sdk.NewServer(&sdk.Implementation{Name: "plain", Version: "1"}, nil)
	type args struct {
		Message string `json:"message"`
	}
	sdk.AddTool(srv, &sdk.Tool{Name: "echo"}, func(ctx context.Context, req *sdk.CallToolRequest, a args) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "Echo: " + a.Message}}}, nil, nil
	})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Secret") != "" || r.Header.Get("Authorization") != "" {
			sawSecret.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// redirector answers every request with a 307 to target.
func redirector(t *testing.T, target string) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func port(t *testing.T, ts *httptest.Server) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

// A url server's connections are checked on the address dialed: a loopback
// or private address, a name resolving to loopback, a redirect from a
// public server to loopback, each refused with an error that says so;
// allowed when the operator allows them.
func TestURLServerAddressPolicy(t *testing.T) {
	t.Parallel()
	var saw atomic.Int32
	target := plainServer(t, &saw)
	targetPort := strconv.Itoa(int(port(t, target)))
	toLoopback := redirector(t, target.URL+"/")
	toLocalhost := redirector(t, "http://localhost:"+targetPort+"/")
	// The redirectors stand for public servers.
	public := func(ap netip.AddrPort) bool {
		return ap.Port() == port(t, toLoopback) || ap.Port() == port(t, toLocalhost)
	}
	cases := []struct {
		name, url, want string
		allowPrivate    bool // allowed with AllowPrivate
	}{
		{"loopback", target.URL, "connecting to 127.0.0.1:" + targetPort + " was refused: it is a loopback address", true},
		{"name resolving to loopback", "http://localhost:" + targetPort + "/", "was refused: it is a loopback address", true},
		{"private", "http://10.255.255.1:9/", "connecting to 10.255.255.1:9 was refused: it is a private address", false},
		{"metadata", "http://169.254.169.254/", "connecting to 169.254.169.254:80 was refused: it is a cloud metadata address", false},
		{"redirect to loopback", toLoopback.URL, "it redirected to " + target.URL + "/, and connecting to 127.0.0.1:" + targetPort + " was refused: it is a loopback address", true},
		{"redirect to localhost", toLocalhost.URL, "it redirected to http://localhost:" + targetPort + "/, and connecting to localhost:" + targetPort + " was refused: it is a loopback address", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			spec := forge.MCPServer{Name: "crm", URL: c.url, Headers: map[string]string{"X-Secret": "tenant-header"}}
			m := newManager(t, Options{InitTimeout: 5 * time.Second, treatAsPublic: public})
			start := time.Now()
			_, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
			if err == nil || !strings.HasPrefix(err.Error(), `MCP server "crm" is not running: `) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), "unless the operator allows it (") {
				t.Fatalf("err = %v\nwant %s", err, c.want)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the refusal took %s", d)
			}
			if !c.allowPrivate {
				return
			}
			m = newManager(t, Options{InitTimeout: 5 * time.Second, treatAsPublic: public, Network: loopbackOK})
			tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{spec})
			if err != nil {
				t.Fatalf("allowed: %v", err)
			}
			if res := call(t, find(t, tools, "crm_echo"), `{"message":"hi"}`); res.Output != "Echo: hi" {
				t.Fatalf("allowed: %+v", res)
			}
		})
	}
}

// Headers and token go to the declared server only, not to another origin
// a redirect leads to.
func TestRedirectDropsHeadersAcrossOrigins(t *testing.T) {
	t.Parallel()
	var saw atomic.Int32
	target := plainServer(t, &saw)
	hop := redirector(t, target.URL+"/")
	m := newManager(t, Options{Network: loopbackOK})
	m.SetToken("ses_1", "crm", "tenant-token")
	tools, _, err := m.Tools(ctx30(t), "ses_1", []forge.MCPServer{{Name: "crm", URL: hop.URL, Headers: map[string]string{"X-Secret": "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	if res := call(t, find(t, tools, "crm_echo"), `{"message":"x"}`); res.Output != "Echo: x" {
		t.Fatalf("%+v", res)
	}
	if n := saw.Load(); n != 0 {
		t.Fatalf("%d requests to the redirect's target carried the tenant's header or token", n)
	}
}

// An allowed address policy lets link-local through the guard, never
// multicast.
func TestGuardControl(t *testing.T) {
	t.Parallel()
	g := &addrGuard{allowLinkLocal: true}
	if err := g.control("tcp4", "169.254.169.254:80", nil); err != nil {
		t.Errorf("link-local allowed: %v", err)
	}
	if err := g.control("tcp4", "127.0.0.1:80", nil); err == nil {
		t.Error("loopback allowed by AllowLinkLocal")
	}
	g = &addrGuard{allowPrivate: true, allowLinkLocal: true}
	var r *AddressRefusedError
	if err := g.control("udp4", "224.0.0.251:5353", nil); !errors.As(err, &r) || r.Hint != "" {
		t.Errorf("multicast: %v", err)
	}
}
