package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// writeObserver is what a store offers for metrics: each write's duration
// and error. The Operations group runs only for stores that offer it.
type writeObserver interface {
	ObserveWrites(f func(d time.Duration, err error))
}

// pinger is what a store offers for readiness probes.
type pinger interface {
	Ping(ctx context.Context) error
}

// writeLog records what ObserveWrites reports.
type writeLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *writeLog) observe(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d < 0 {
		panic("negative write duration")
	}
	l.errs = append(l.errs, err)
}

func (l *writeLog) taken() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.errs
	l.errs = nil
	return out
}

var operationTests = []test{
	{name: "ObserveWritesSeesEachWriteAndNoRead", run: func(f *fixture) {
		wo, ok := f.s.(writeObserver)
		if !ok {
			f.Skip("store does not report its writes")
		}
		var log writeLog
		wo.ObserveWrites(log.observe)
		f.createAgent(tenantA, "a")
		if errs := log.taken(); len(errs) != 1 || errs[0] != nil {
			f.Fatalf("one successful write reported %v", errs)
		}
		_, err := f.s.GetAgent(f.ctx, tenantA, "a")
		f.ok(err, "GetAgent")
		_, _, err = f.s.ListAgents(f.ctx, tenantA, forge.ListOptions{})
		f.ok(err, "ListAgents")
		if errs := log.taken(); len(errs) != 0 {
			f.Fatalf("reads reported as writes: %v", errs)
		}
		// A refused write is reported with its error.
		f.is(f.s.CreateAgent(f.ctx, sampleAgent(tenantA, "a")), forge.ErrConflict, "CreateAgent twice")
		if errs := log.taken(); len(errs) != 1 || errs[0] == nil {
			f.Fatalf("a refused write reported %v", errs)
		}
		wo.ObserveWrites(nil)
		f.createAgent(tenantA, "b")
		if errs := log.taken(); len(errs) != 0 {
			f.Fatalf("writes reported after ObserveWrites(nil): %v", errs)
		}
	}},
	{name: "PingAnswersUntilClosed", run: func(f *fixture) {
		p, ok := f.s.(pinger)
		if !ok {
			f.Skip("store has no Ping")
		}
		f.ok(p.Ping(f.ctx), "Ping")
		f.ok(f.s.Close(f.ctx), "Close")
		if err := p.Ping(f.ctx); err == nil {
			f.Fatal("Ping of a closed store succeeded")
		}
	}},
}
