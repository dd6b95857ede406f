package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// spawned is a `forge serve` process this command started, on a fresh
// database in a temporary directory, with openai/<model> pointing at a fake
// model server in this process that answers every request with the
// instant reply "ok" and records the requests' bodies.
type spawned struct {
	url      string // forge's base URL
	modelURL string // the fake's base URL, ending in /v1
	pid      int
	db       string // the database file

	model fakeModel
	cmd   *exec.Cmd
	dir   string
	logs  *lockedBuffer
	exit  chan error
}

// fakeModel is a model server of this process: the instant one, or
// openaitest.
type fakeModel interface {
	URL() string
	Close()
	RecordRequests(on bool)
	// takeBodies returns the bodies of the requests recorded since the
	// last call.
	takeBodies() [][]byte
}

// openaitestModel is openaitest as a fakeModel.
type openaitestModel struct {
	*openaitest.Server
	taken int // requests already returned by takeBodies
}

func (o *openaitestModel) takeBodies() [][]byte {
	reqs := o.Requests()
	out := make([][]byte, 0, len(reqs)-o.taken)
	for _, r := range reqs[o.taken:] {
		out = append(out, r.Body)
	}
	o.taken = len(reqs)
	return out
}

// startFake starts the fake model server named kind: "instant" or
// "openaitest".
func startFake(kind string) (fakeModel, error) {
	switch kind {
	case "instant":
		return startInstantModel(), nil
	case "openaitest":
		return &openaitestModel{Server: openaitest.Start()}, nil
	}
	return nil, fmt.Errorf("unknown fake model server %q: want instant or openaitest", kind)
}

// spawnKey is the API key forge sends the fake (which accepts any).
const spawnKey = "sk-forge-load"

// findForge returns the forge binary to run: bin when given, else a forge
// next to this executable, else one on $PATH.
func findForge(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "forge")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("forge")
	if err != nil {
		return "", errors.New("no forge binary next to forge-load nor on $PATH: build one (go build -o forge ./cmd/forge) or pass --forge-bin")
	}
	return p, nil
}

// spawn starts the fake model server (see startFake; in a process of its
// own unless inProcess) and `forge serve` on loopback ports of their
// choosing; extra are more flags for forge serve (--pprof-addr, say). The
// caller must stop it.
func spawn(ctx context.Context, forgeBin, fake string, inProcess bool, extra []string) (*spawned, error) {
	var model fakeModel
	if inProcess {
		m, err := startFake(fake)
		if err != nil {
			return nil, err
		}
		model = m
	} else {
		command, env, err := fakeCommand([]string{"--fake", fake, "--until-stdin-closes"})
		if err != nil {
			return nil, err
		}
		m, err := startRemoteFake(ctx, command, env)
		if err != nil {
			return nil, err
		}
		model = m
	}
	dir, err := os.MkdirTemp("", "forge-load-")
	if err != nil {
		model.Close()
		return nil, err
	}
	db := filepath.Join(dir, "forge.db")
	s, err := startServe(ctx, forgeBin, model.URL(), append([]string{"--db", db}, extra...))
	if err != nil {
		model.Close()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.model, s.dir, s.db = model, dir, db
	return s, nil
}

// startServe starts `forge serve` on a loopback port of its choosing, with
// args (--db among them) and openai/<model> pointing at the model server
// at modelURL, and waits until it listens. The caller must stop it.
func startServe(ctx context.Context, forgeBin, modelURL string, args []string) (*spawned, error) {
	args = append([]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "warn"}, args...)
	cmd := exec.Command(forgeBin, args...)
	// The server reads OPENAI_* and FORGE_* from its environment: only ours
	// may reach it.
	env := []string{"OPENAI_BASE_URL=" + modelURL, "OPENAI_API_KEY=" + spawnKey, "FORGE_API_KEYS="}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "FORGE_") && !strings.HasPrefix(kv, "ANTHROPIC_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	s := &spawned{modelURL: modelURL, cmd: cmd, logs: &lockedBuffer{}, exit: make(chan error, 1)}
	cmd.Stderr = s.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", forgeBin, err)
	}
	s.pid = cmd.Process.Pid
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if u, ok := strings.CutPrefix(line, "forge listening on "); ok {
				select {
				case listening <- u:
				default:
				}
				continue
			}
			fmt.Fprintln(s.logs, line) // the pprof address, say
		}
	}()
	go func() { s.exit <- cmd.Wait() }()
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	select {
	case s.url = <-listening:
		return s, nil
	case err := <-s.exit:
		s.exit <- err
		logs := s.logs.String()
		s.stop()
		return nil, fmt.Errorf("forge serve exited before listening: %v\n%s", err, logs)
	case <-timer.C:
		logs := s.logs.String()
		s.stop()
		return nil, fmt.Errorf("forge serve did not listen within 60 s:\n%s", logs)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// stop ends forge serve (SIGTERM, then SIGKILL after 20 s), closes the fake
// and removes the temporary directory. It returns the server's log when
// the server did not exit cleanly.
func (s *spawned) stop() error {
	var err error
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(20 * time.Second)
		select {
		case err = <-s.exit:
		case <-timer.C:
			_ = s.cmd.Process.Kill()
			err = fmt.Errorf("forge serve did not stop within 20 s of SIGTERM: %v", <-s.exit)
		}
		timer.Stop()
	}
	s.cleanup()
	if err != nil {
		return fmt.Errorf("forge serve: %w\n%s", err, s.logs.String())
	}
	return nil
}

func (s *spawned) cleanup() {
	if s.model != nil {
		s.model.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cpuTime returns the CPU time (user and system, all threads) process pid
// has used so far, from /proc/PID/stat (in clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// utime and stime are fields 14 and 15: the 12th and 13th after ')'.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(utime+stime) * tick, nil
}

// pprofAddr is the host:port of the server's net/http/pprof listener, from
// the line forge serve prints for --pprof-addr; "" when it printed none.
func (s *spawned) pprofAddr() string {
	for l := range strings.Lines(s.logs.String()) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "pprof listening on http://"); ok {
			return strings.TrimSuffix(rest, "/debug/pprof/")
		}
	}
	return ""
}
