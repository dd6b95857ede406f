package eventpack

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A round costs about the same for one turn or many (a read of a few
// queries per tenant and one write): the packer lets turns gather for its
// delay after the first is queued, up to MaxPackRound.
const (
	PackDelay    = 100 * time.Millisecond
	MaxPackRound = 256
)

// TurnKey names a turn whose log to pack.
type TurnKey struct{ Tenant, Session, Turn string }

// PackWork is what a store does for its packer.
type PackWork interface {
	// PackTurns packs the logs of ended turns (a turn that runs, or was
	// packed, is left as it is).
	PackTurns(ctx context.Context, keys []TurnKey) error
	// UnpackedTurns lists the turns whose packs wait (ended or not).
	UnpackedTurns(ctx context.Context) ([]TurnKey, error)
}

// Packer packs the logs of ended turns against their rows, off the
// writes' path, on a goroutine it owns (Stop waits for it). Terminal
// writes queue their turn (Add); the first round sweeps the log for turns
// left waiting (a crash between a terminal write and its packing leaves a
// correct, larger log until then). A turn whose packing fails is left as
// it is until the process restarts: packing is an optimization of a log
// that is correct without it.
type Packer struct {
	w     PackWork
	delay time.Duration
	kick  chan struct{} // capacity 1: turns were queued
	quit  chan struct{}
	done  chan struct{}

	round sync.Mutex // one round at a time (the goroutine's, or Flush's)

	mu     sync.Mutex // guards the following
	queue  []TurnKey
	queued map[TurnKey]bool
	failed map[TurnKey]bool
	sweep  bool // the log must be swept for turns to pack

	// For tests: turns packed, last error.
	packed  atomic.Int64
	lastErr atomic.Pointer[error]
}

// NewPacker returns a packer for w; with start, its goroutine runs (else
// only Flush packs).
func NewPacker(w PackWork, delay time.Duration, start bool) *Packer {
	p := &Packer{w: w, delay: delay, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		queued: map[TurnKey]bool{}, failed: map[TurnKey]bool{}, sweep: true}
	if start {
		go p.run()
	} else {
		close(p.done)
	}
	p.poke()
	return p
}

// Packed is the count of turns packed so far.
func (p *Packer) Packed() int64 { return p.packed.Load() }

// LastErr is the last error of a round, or nil.
func (p *Packer) LastErr() error {
	if e := p.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Add queues an ended turn (its terminal write committed).
func (p *Packer) Add(k TurnKey) {
	p.mu.Lock()
	if !p.queued[k] && !p.failed[k] {
		p.queued[k] = true
		p.queue = append(p.queue, k)
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Packer) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Stop packs what is queued (for a few seconds at most), then stops the
// goroutine.
func (p *Packer) Stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

func (p *Packer) run() {
	defer close(p.done)
	ctx := context.Background()
	for {
		select {
		case <-p.quit:
			p.drain()
			return
		case <-p.kick:
		}
		t := time.NewTimer(p.delay)
		select {
		case <-p.quit:
			t.Stop()
			p.drain()
			return
		case <-t.C:
		}
		for p.roundOnce(ctx) {
		}
	}
}

// drainTimeout bounds how long Close packs what is queued.
const drainTimeout = 5 * time.Second

// drain packs the queued turns before the store closes, so that a clean
// shutdown leaves a packed log (what it cannot finish, the next Open's
// sweep does).
func (p *Packer) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	p.mu.Lock()
	p.sweep = false
	p.mu.Unlock()
	for p.roundOnce(ctx) {
	}
}

// Flush packs every turn queued or waiting in the log, now.
func (p *Packer) Flush(ctx context.Context) error {
	p.mu.Lock()
	p.sweep = true
	p.mu.Unlock()
	for {
		more, err := p.roundErr(ctx)
		if err != nil || !more {
			return err
		}
	}
}

// roundOnce runs a round and reports whether turns are left.
func (p *Packer) roundOnce(ctx context.Context) bool {
	more, err := p.roundErr(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		p.lastErr.Store(&err)
		return more
	}
	return more
}

// roundErr packs up to maxPackRound turns and reports whether turns are
// left in the queue.
func (p *Packer) roundErr(ctx context.Context) (bool, error) {
	p.round.Lock()
	defer p.round.Unlock()
	p.mu.Lock()
	sweep := p.sweep
	p.sweep = false
	p.mu.Unlock()
	if sweep {
		keys, err := p.w.UnpackedTurns(ctx)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			p.Add(k)
		}
	}
	p.mu.Lock()
	n := min(len(p.queue), MaxPackRound)
	keys := append([]TurnKey(nil), p.queue[:n]...)
	p.queue = p.queue[n:]
	for _, k := range keys {
		delete(p.queued, k)
	}
	more := len(p.queue) > 0
	p.mu.Unlock()
	if len(keys) == 0 {
		return false, nil
	}
	if err := p.w.PackTurns(ctx, keys); err == nil {
		p.packed.Add(int64(len(keys)))
		return more, nil
	} else if ctx.Err() != nil || len(keys) == 1 {
		p.fail(keys, ctx)
		return more, err
	}
	// One turn at a time, to find those that fail.
	var first error
	for _, k := range keys {
		if err := p.w.PackTurns(ctx, []TurnKey{k}); err != nil {
			p.fail([]TurnKey{k}, ctx)
			first = cmp.Or(first, err)
			continue
		}
		p.packed.Add(1)
	}
	return more, first
}

// fail keeps keys from being packed again before a restart, unless the
// round was interrupted.
func (p *Packer) fail(keys []TurnKey, ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.failed[k] = true
	}
}
