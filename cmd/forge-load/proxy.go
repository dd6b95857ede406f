package main

import (
	"net"
	"sync"
	"sync/atomic"
)

// countingProxy forwards TCP connections to target and counts, over all of
// them, the bytes both ways and the round trips: a client write that
// follows the server's answer (or opens the connection). Pipelined
// commands sent before an answer count as one; a server's pushes (Pub/Sub
// messages) count bytes only.
type countingProxy struct {
	ln     net.Listener
	target string
	trips  atomic.Int64
	bytes  atomic.Int64
	wg     sync.WaitGroup

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

func startProxy(target string) (*countingProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) counts() (trips, bytes int64) { return p.trips.Load(), p.bytes.Load() }

func (p *countingProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *countingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *countingProxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(s) {
		s.Close()
		return
	}
	defer func() {
		p.mu.Lock()
		delete(p.conns, s)
		p.mu.Unlock()
		s.Close()
	}()
	var answered atomic.Bool // the server spoke since the client's last write
	answered.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.pump(s, c, func() { answered.Store(true) })
		c.Close() // the server hung up: so does the client's side
	}()
	p.pump(c, s, func() {
		if answered.Swap(false) {
			p.trips.Add(1)
		}
	})
	s.Close()
	<-done
}

// pump copies from src to dst, calling onData before forwarding each read.
func (p *countingProxy) pump(src, dst net.Conn, onData func()) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			onData()
			p.bytes.Add(int64(n))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// close stops accepting, closes every connection and waits for their
// goroutines.
func (p *countingProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}
