package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Server is a redis-server of a test's own, on a free loopback port, with
// an append-only file: the test stops it (SIGTERM, as an operator's
// restart does) and starts it again on the same port and directory, and
// its keys survive (a restart with AOF).
type Server struct {
	tb   testing.TB
	bin  string
	port int
	dir  string

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd
}

// Own starts a Server, stopped when tb ends. Without redis-server it skips
// (fails with FORGE_TEST_REQUIRE_SERVICES=1).
func Own(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			tb.Fatal("redis-server is not installed")
		}
		tb.Skip("redis-server is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{tb: tb, bin: bin, port: port, dir: tb.TempDir()}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// URL is the server's URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Start starts the server (again) and waits until it accepts connections.
func (s *Server) Start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command(s.bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(s.port), "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--dir", s.dir)
	if err := cmd.Start(); err != nil {
		s.tb.Fatal(err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server did not start: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop stops the server (SIGTERM: it writes its append-only file and
// closes every connection) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Shards starts n Servers (see Own) and returns them with the list of
// their URLs, comma-separated, as `forge serve --redis` takes it.
func Shards(tb testing.TB, n int) ([]*Server, string) {
	tb.Helper()
	servers := make([]*Server, n)
	urls := make([]string, n)
	for i := range servers {
		servers[i] = Own(tb)
		urls[i] = servers[i].URL()
	}
	return servers, strings.Join(urls, ",")
}

// Client returns a client of the server, closed when the test ends.
func (s *Server) Client() *goredis.Client {
	opts, err := goredis.ParseURL(s.URL())
	if err != nil {
		s.tb.Fatal(err)
	}
	c := goredis.NewClient(opts)
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}
