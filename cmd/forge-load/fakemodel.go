package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The fake model server runs in a process of its own (the fake-model
// mode, started by spawn) unless --fake-in-process: a model call from
// forge then crosses processes, and so does the floor measured from here.
// Under load on two cores, each wake-up of another process costs tens of
// microseconds, several times over in a streamed call: a floor measured
// inside one process would understate the model call forge makes.

func runFakeModel(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("fake-model", flag.ContinueOnError)
	fake := fs.String("fake", "instant", "instant (openaitest's SSE bytes, without decoding the request) or openaitest")
	duration := fs.Duration("duration", time.Hour, "how long to serve (at most 24h)")
	untilEOF := fs.Bool("until-stdin-closes", false, "also stop when standard input closes (how spawn stops it)")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	if *duration <= 0 || *duration > 24*time.Hour {
		return fmt.Errorf("--duration must be more than 0 and at most 24h")
	}
	m, err := startFake(*fake)
	if err != nil {
		return err
	}
	defer m.Close()
	ctrl := httptest.NewServer(controlHandler(m))
	defer ctrl.Close()
	fmt.Fprintf(out, "fake model listening on %s control %s\n", m.URL(), ctrl.URL)

	timer := time.NewTimer(*duration)
	defer timer.Stop()
	eof := make(chan struct{})
	if *untilEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(eof)
		}()
	}
	select {
	case <-ctx.Done():
	case <-timer.C:
	case <-eof:
	}
	return nil
}

// controlHandler lets the parent turn recording on or off and fetch the
// recorded request bodies, and serves the bare broadcaster (broadcast.go).
func controlHandler(m fakeModel) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /record", func(w http.ResponseWriter, r *http.Request) {
		m.RecordRequests(r.URL.Query().Get("on") != "0")
	})
	mux.HandleFunc("GET /bodies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(m.takeBodies()) // [][]byte: base64 strings
	})
	newBroadcaster().register(mux)
	return mux
}

// remoteFake is a fake model server in a child process.
type remoteFake struct {
	url, control string
	cmd          *exec.Cmd
	stdin        io.Closer
	exit         chan error
	logs         *lockedBuffer
}

// startRemoteFake runs command (this program in its fake-model mode, with
// the flags it needs) and waits for it to listen.
func startRemoteFake(ctx context.Context, command []string, env []string) (*remoteFake, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = env
	f := &remoteFake{cmd: cmd, exit: make(chan error, 1), logs: &lockedBuffer{}}
	cmd.Stderr = f.logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	f.stdin = stdin
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the fake model process: %w", err)
	}
	go func() { f.exit <- cmd.Wait() }()
	ready := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), "fake model listening on ")
			if u, c, ok2 := strings.Cut(rest, " control "); ok && ok2 {
				ready <- [2]string{u, c}
			}
		}
	}()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case urls := <-ready:
		f.url, f.control = urls[0], urls[1]
		return f, nil
	case err := <-f.exit:
		return nil, fmt.Errorf("the fake model process exited: %v\n%s", err, f.logs.String())
	case <-timer.C:
	case <-ctx.Done():
	}
	f.Close()
	return nil, fmt.Errorf("the fake model process did not listen:\n%s", f.logs.String())
}

func (f *remoteFake) URL() string { return f.url }

// pid is the fake model process's id.
func (f *remoteFake) pid() int { return f.cmd.Process.Pid }

// Close closes the child's stdin, which ends it, and waits for it (killing
// it after 10 s).
func (f *remoteFake) Close() {
	_ = f.stdin.Close()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-f.exit:
	case <-timer.C:
		_ = f.cmd.Process.Kill()
		<-f.exit
	}
}

func (f *remoteFake) RecordRequests(on bool) {
	v := "1"
	if !on {
		v = "0"
	}
	if resp, err := http.Post(f.control+"/record?on="+v, "text/plain", nil); err == nil {
		resp.Body.Close()
	}
}

func (f *remoteFake) takeBodies() [][]byte {
	resp, err := http.Get(f.control + "/bodies")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var bodies [][]byte
	if err := json.NewDecoder(resp.Body).Decode(&bodies); err != nil {
		return nil
	}
	return bodies
}

// fakeCommand is how this program runs its fake-model mode: the binary
// itself, or, in its tests, the test binary (see TestMain).
var fakeCommand = func(args []string) ([]string, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	return append([]string{self, "fake-model"}, args...), os.Environ(), nil
}
