package httpapi

import (
	"context"
	"crypto/subtle"
	"net/http"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// ReadyCheck is one dependency GET /readyz checks: the store, Redis.
type ReadyCheck struct {
	// Name is what the answer calls it ("store", "redis").
	Name string
	// Check returns nil when the dependency answers. It should honour ctx.
	Check func(ctx context.Context) error
}

// readyTimeout bounds a readiness probe: a dependency that has not
// answered by then is failing.
const readyTimeout = 5 * time.Second

// readyAnswer is the body of GET /readyz.
type readyAnswer struct {
	// Status is ready, unavailable (a check failed) or draining (the
	// server is shutting down).
	Status string `json:"status"`
	// Checks holds each dependency's state: ok or failing. Why one fails
	// goes to the log only: the endpoint needs no key.
	Checks map[string]string `json:"checks"`
}

// health answers 200 while the process serves: liveness, which depends on
// nothing else (a dead database is /readyz's business, not a reason to
// restart the process).
func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// ready answers 200 when every check passes, 503 when one fails or the
// server drains. The checks run concurrently, each bounded by
// readyTimeout.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) error {
	ans := readyAnswer{Status: "ready", Checks: make(map[string]string, len(s.readyChecks)+1)}
	if s.draining.Load() {
		// A draining replica fails at once, without asking its
		// dependencies (docs/distributed.md).
		ans.Status, ans.Checks["shutdown"] = "draining", "failing"
		writeJSON(w, http.StatusServiceUnavailable, ans)
		return nil
	}
	ans.Checks["shutdown"] = "ok"
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	errs := make([]error, len(s.readyChecks))
	var wg sync.WaitGroup
	for i, c := range s.readyChecks {
		wg.Go(func() { errs[i] = c.Check(ctx) })
	}
	wg.Wait()
	for i, c := range s.readyChecks {
		if errs[i] != nil {
			ans.Status, ans.Checks[c.Name] = "unavailable", "failing"
			s.log.Warn("readiness check failed", "check", c.Name, "err", errs[i])
			continue
		}
		ans.Checks[c.Name] = "ok"
	}
	status := http.StatusOK
	if ans.Status != "ready" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, ans)
	return nil
}

// Drain makes GET /readyz answer 503 (draining) from now on, so load
// balancers stop sending new work while running turns finish. Everything
// else keeps being served.
func (s *Server) Drain() { s.draining.Store(true) }

// SSESubscribers is the number of Server-Sent Events streams open now,
// on every route (the Forge API and the protocols).
func (s *Server) SSESubscribers() int64 { return s.sseOpen.Load() }

// serveMetrics serves GET /metrics: every series (Config.Metrics) to the
// operator key, and to everyone on loopback when the server has no keys
// (the guard has checked the Host: the one user is the operator); a
// tenant key gets its tenant's series only (Config.TenantMetrics), since
// the others name other tenants' tools, subagents and MCP servers.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	if s.metrics == nil {
		return forge.Errorf(forge.ErrNotFound, "metrics are not enabled on this server")
	}
	if s.operatorKey != "" {
		if token, err := bearerToken(r); err == nil && subtle.ConstantTimeCompare([]byte(token), []byte(s.operatorKey)) == 1 {
			s.metrics.ServeHTTP(w, r)
			return nil
		}
	}
	keyed, err := s.keysConfigured(r.Context())
	if err != nil {
		return err
	}
	if !keyed {
		s.metrics.ServeHTTP(w, r)
		return nil
	}
	tenant, err := s.tenantFor(r)
	if err != nil {
		return err
	}
	if s.tenantMetrics == nil {
		return forge.Errorf(forge.ErrForbidden, "this server's metrics are served to its operator key only")
	}
	s.tenantMetrics(tenant).ServeHTTP(w, r)
	return nil
}
