package pgtest

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a loopback TCP proxy in front of PostgreSQL that counts network
// round trips: on each connection, an answer from the server that follows
// something the client sent is one trip (a pipelined batch of statements
// is one trip; a statement waiting for the previous one's answer is
// another). Tests of what a store call or a whole turn costs use it with
// the real driver, unchanged.
type Proxy struct {
	ln    net.Listener
	trips atomic.Int64
	// down: the database is unreachable (Cut): connections are refused.
	down atomic.Bool

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the database rawURL names and returns it and
// rawURL pointing at it instead. It stops when tb ends.
func NewProxy(tb testing.TB, rawURL string) (*Proxy, string) {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatalf("proxy: %v", err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept(target)
	tb.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

// Cut makes the database unreachable through the proxy: the open
// connections are closed and new ones are closed at once, until Restore.
func (p *Proxy) Cut() {
	p.down.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore ends a Cut.
func (p *Proxy) Restore() { p.down.Store(false) }

// RoundTrips is the number of round trips so far, on every connection.
func (p *Proxy) RoundTrips() int64 { return p.trips.Load() }

func (p *Proxy) accept(target string) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.down.Load() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		// sent: the client wrote since the server last answered.
		var sent atomic.Bool
		p.wg.Add(2)
		go p.pipe(s, c, func() { sent.Store(true) }, c, s)
		go p.pipe(c, s, func() {
			if sent.Swap(false) {
				p.trips.Add(1)
			}
		}, c, s)
	}
}

// track registers a pair of connections, unless the proxy is closing.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst, calling read before forwarding each read;
// it closes both connections of the pair when either side ends.
func (p *Proxy) pipe(dst, src net.Conn, read func(), pair ...net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				_ = err // a connection reset: the pair ends
			}
			break
		}
	}
	p.mu.Lock()
	for _, c := range pair {
		_ = c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
