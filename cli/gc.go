package cli

import (
	"os"
	"runtime/debug"
)

// serveGCPercent is forge serve's GC target (GOGC) when the environment
// sets none. A trivial turn allocates a few hundred KB against a live heap
// of some tens of MB, so with Go's default of 100 the collector runs every
// few dozen turns; at 400 it costs about a tenth of the server's CPU less
// per turn and shortens the tail, for a heap up to five times the live one
// instead of twice (docs/benchmarks.md, third pass). GOGC, and GOMEMLIMIT,
// still apply when set.
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
