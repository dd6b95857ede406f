package cli

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// serveGCPercent is forge serve's GC target (GOGC) when the environment
// sets none. A trivial turn allocates a few hundred KB against a live heap
// of some tens of MB, so with Go's default of 100 the collector runs every
// few dozen turns; at 400 it costs about a tenth of the server's CPU less
// per turn and shortens the tail, for a heap up to five times the live one
// instead of twice (docs/benchmarks.md, third pass and "GC target and
// memory limit": at 100 sessions 17 % more turns/s than GOGC=100, for
// 1.9 times its peak RSS). GOGC, and GOMEMLIMIT, still apply when set; a
// container's memory limit caps the heap (tuneServeMemory), so the larger
// target never runs a limited server out of memory.
const serveGCPercent = 400

// tuneGC sets the GC target of forge serve unless GOGC is set. It returns
// the percent it set, or -1 when it left the runtime's alone.
func tuneGC(lookupEnv func(string) (string, bool), setGCPercent func(int) int) int {
	if _, ok := lookupEnv("GOGC"); ok {
		return -1
	}
	setGCPercent(serveGCPercent)
	return serveGCPercent
}

// tuneServeGC is tuneGC on this process.
func tuneServeGC() { tuneGC(os.LookupEnv, debug.SetGCPercent) }

// serveMemoryRatio is the part of the cgroup's memory limit the Go heap
// may use before the collector works harder (GOMEMLIMIT); the rest is
// for memory the Go runtime does not count (SQLite's page cache, stacks).
const serveMemoryRatio = 0.9

// tuneServeMemory sets GOMEMLIMIT to serveMemoryRatio of the cgroup's
// memory limit (v2 or v1) when the environment sets none and a limit
// exists, and logs what it set.
func tuneServeMemory(log *slog.Logger) {
	limit, err := memlimit.Set(
		memlimit.WithRatio(serveMemoryRatio),
		memlimit.WithProvider(memlimit.FromCgroup),
		memlimit.WithLogger(slog.New(slog.DiscardHandler)),
	)
	switch {
	case err != nil:
		log.Debug("no memory limit from the cgroup", "err", err)
	case limit > 0 && limit < 1<<62:
		log.Info("Go memory limit from the cgroup", "gomemlimit_bytes", limit)
	}
}
