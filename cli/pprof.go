package cli

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"time"
)

// serveProfiles serves the net/http/pprof handlers on their own loopback
// listener (never on the API's), for profiling a running server:
//
//	go tool pprof http://127.0.0.1:6060/debug/pprof/profile?seconds=20
//
// Block and mutex profiles are sampled only while the listener is up. It
// returns a function that closes the listener and waits for its server.
func serveProfiles(ln net.Listener, log *slog.Logger, format string) (stop func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof listener", "err", err)
		}
	}()
	// One block event per 10 µs blocked, one mutex contention in 10: cheap
	// enough to leave on while profiling, fine enough to show the tail.
	runtime.SetBlockProfileRate(10_000)
	prevMutex := runtime.SetMutexProfileFraction(10)
	log.Info("pprof listening", "addr", ln.Addr().String())
	announce(os.Stdout, format, "pprof listening on", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(prevMutex)
	}
}
