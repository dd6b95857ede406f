package postgres_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// onWriteConn calls hook (once armed) when a request leaves for the
// server.
type onWriteConn struct {
	net.Conn
	mu   *sync.Mutex
	hook *func()
}

func (c *onWriteConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	h := *c.hook
	*c.hook = nil
	c.mu.Unlock()
	if h != nil {
		h()
	}
	return c.Conn.Write(p)
}

// TestSentWriteOutlivesCancel: a caller that gives up after its write left
// learns the write's real outcome, never "cancelled" for a write that
// landed; a write not yet sent is abandoned.
func TestSentWriteOutlivesCancel(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		hook func()
	)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &onWriteConn{Conn: c, mu: &mu, hook: &hook}, nil
	}
	// No packer: its round trips would share the one connection, and the
	// armed write could be one of them.
	s := open(t, pgtest.NewDatabase(t), postgres.WithoutPacker(postgres.WithDial(postgres.Options{MaxConns: 1, MinIdleConns: 1}, dial)))
	ses := seed(t, s, "acme", true)

	// Prepared already, so the armed write is the one that runs it.
	if _, err := s.ReserveSeqs(ctx, "acme", ses.ID, 1); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	mu.Lock()
	hook = cancel // the caller gives up as the write goes out
	mu.Unlock()
	bound, err := s.ReserveSeqs(cctx, "acme", ses.ID, 5)
	if err != nil {
		t.Fatalf("ReserveSeqs cancelled in flight: %v (its write may have landed: the caller must know)", err)
	}
	if again, err := s.ReserveSeqs(ctx, "acme", ses.ID, 1); err != nil || again != bound+1 {
		t.Fatalf("next ReserveSeqs = %d, %v; want %d", again, err, bound+1)
	}

	// Cancelled before it is sent: nothing is written.
	if _, err := s.ReserveSeqs(cctx, "acme", ses.ID, 100); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReserveSeqs with a cancelled context: %v", err)
	}
	if again, err := s.ReserveSeqs(ctx, "acme", ses.ID, 1); err != nil || again != bound+2 {
		t.Fatalf("ReserveSeqs after the abandoned one = %d, %v; want %d", again, err, bound+2)
	}
}

// TestTextPostgresCannotHoldIsInvalid: free text is bytea and keeps any
// byte (storetest's Content group); the few identifiers stored as text
// refuse a NUL or bytes that are not UTF-8 with ErrInvalid, writing
// nothing, rather than failing as an internal error.
func TestTextPostgresCannotHoldIsInvalid(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.NewDatabase(t), testOpts)
	for _, bad := range []string{"agent\x00", "agent \xff"} {
		ses := &forge.Session{ID: "ses_x", Tenant: "acme", Agent: bad, MainThreadID: "thr_x"}
		if err := s.CreateSession(ctx, ses); !errors.Is(err, forge.ErrInvalid) {
			t.Fatalf("CreateSession with agent %q: %v, want ErrInvalid", bad, err)
		}
		if _, err := s.GetSession(ctx, "acme", "ses_x"); !errors.Is(err, forge.ErrNotFound) {
			t.Fatalf("GetSession after the refused create: %v", err)
		}
	}
}
