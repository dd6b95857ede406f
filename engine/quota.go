package engine

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
)

// TurnQuota limits, per tenant, the turns of some providers' models.
// forge serve applies one to the scripted provider: it asks nobody for a
// key, and each of its turns costs the operator CPU and storage. A turn
// over the quota is refused before anything is stored, with ErrRateLimited
// and a retry delay (forge.RetryAfter). The counts are this process's:
// each replica keeps its own.
type TurnQuota struct {
	// Providers are the providers whose models it covers (the prefix of
	// "provider/model").
	Providers []string
	// Running is how many such turns a tenant may run at once; 0: no
	// limit.
	Running int
	// PerMinute is how many such turns a tenant may start per minute: a
	// bucket as deep as PerMinute, refilled continuously; 0: no limit.
	PerMinute int
}

// quotas keeps the tenants' counts of a TurnQuota.
type quotas struct {
	quota     TurnQuota
	providers map[string]bool
	clock     forge.Clock

	mu      sync.Mutex // guards the following
	tenants map[string]*tenantQuota
}

// tenantQuota is one tenant's count.
type tenantQuota struct {
	running int
	tokens  float64   // turns it may start now
	at      time.Time // when tokens was computed
}

// newQuotas returns the counts of q; nil when q limits nothing.
func newQuotas(q *TurnQuota, clock forge.Clock) *quotas {
	if q == nil || len(q.Providers) == 0 || (q.Running <= 0 && q.PerMinute <= 0) {
		return nil
	}
	qs := &quotas{quota: *q, providers: map[string]bool{}, clock: clock, tenants: map[string]*tenantQuota{}}
	for _, p := range q.Providers {
		qs.providers[p] = true
	}
	return qs
}

// acquire takes a slot for a turn of tenant running model; release gives
// it back (nil when the quota does not cover the model). Over the quota it
// refuses with ErrRateLimited, saying when to retry.
func (qs *quotas) acquire(tenant, model string) (release func(), err error) {
	if qs == nil {
		return nil, nil
	}
	prov, _, _ := strings.Cut(model, "/")
	if !qs.providers[prov] {
		return nil, nil
	}
	now := qs.clock.Now()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	t := qs.tenants[tenant]
	if t == nil {
		t = &tenantQuota{tokens: float64(qs.quota.PerMinute), at: now}
		qs.tenants[tenant] = t
	}
	if r := qs.quota.Running; r > 0 && t.running >= r {
		return nil, forge.WithRetryAfter(forge.Errorf(forge.ErrRateLimited,
			"this tenant already runs %d turns of %s models, the most it may run at once; retry when one has ended", t.running, prov), time.Second)
	}
	if pm := qs.quota.PerMinute; pm > 0 {
		rate := float64(pm) / 60 // per second
		t.tokens = min(float64(pm), t.tokens+now.Sub(t.at).Seconds()*rate)
		t.at = now
		if t.tokens < 1 {
			wait := time.Duration(math.Ceil((1 - t.tokens) / rate * float64(time.Second)))
			return nil, forge.WithRetryAfter(forge.Errorf(forge.ErrRateLimited,
				"this tenant may start at most %d turns of %s models per minute; retry in %d s", pm, prov, int(math.Ceil(wait.Seconds()))), wait)
		}
		t.tokens--
	}
	t.running++
	var once sync.Once
	return func() { once.Do(func() { qs.release(tenant) }) }, nil
}

// release gives back a running turn's slot, forgetting a tenant whose
// count is back to nothing.
func (qs *quotas) release(tenant string) {
	now := qs.clock.Now()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	t := qs.tenants[tenant]
	if t == nil {
		return
	}
	t.running--
	full := qs.quota.PerMinute <= 0 ||
		t.tokens+now.Sub(t.at).Seconds()*float64(qs.quota.PerMinute)/60 >= float64(qs.quota.PerMinute)
	if t.running <= 0 && full {
		delete(qs.tenants, tenant)
	}
}
