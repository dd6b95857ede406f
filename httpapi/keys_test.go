package httpapi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
)

// storedKeyStack is a stack whose server also resolves keys kept in its
// store, with the given static keys.
func storedKeyStack(t *testing.T, static map[string]string) (*stack, forge.KeyStore, *manualClock) {
	var ks forge.KeyStore
	clock := &manualClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	s := newStack(t, func(c *httpapi.Config) {
		ks = c.Store.(forge.KeyStore)
		c.Keys = static
		c.KeyResolver = httpapi.StoredKeys(ks)
		c.Clock = clock
	})
	return s, ks, clock
}

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestStoredKeys: a key created in the store authenticates at once; once
// one exists every /v1 request needs a key; a revoked key stops at once;
// revoking the last key does not reopen the server.
func TestStoredKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, ks, clock := storedKeyStack(t, nil)
	listSessions := func(auth string) answer {
		return s.do(req{method: "GET", path: "/v1/sessions", header: map[string]string{"Authorization": auth}})
	}

	// No key anywhere: single tenant, no authentication.
	s.createAgent("a")
	mine := s.createSession("a")

	k, secret, err := ks.CreateKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	// A keyless server trusts its last look at the store for a second.
	clock.advance(1100 * time.Millisecond)
	for _, bad := range []string{"", "Bearer nope", "Bearer " + secret + "x", "Basic " + secret, "Bearer"} {
		if a := listSessions(bad); a.status != 401 || a.errCode() != "unauthorized" {
			t.Fatalf("Authorization %q once a key is stored: %s", bad, a)
		}
	}
	s.key = secret
	var page struct{ Data []forge.Session }
	s.call("GET", "/v1/sessions", nil, 200, &page)
	if len(page.Data) != 0 {
		t.Fatalf("acme lists the default tenant's sessions: %+v", page.Data)
	}
	if a := s.do(req{method: "GET", path: "/v1/sessions/" + mine.ID}); a.status != 404 {
		t.Fatalf("acme reads the default tenant's session: %s", a)
	}
	s.createAgent("a")
	theirs := s.createSession("a")

	if err := ks.RevokeKey(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if a := s.do(req{method: "GET", path: "/v1/sessions/" + theirs.ID}); a.status != 401 {
		t.Fatalf("revoked key: %s", a)
	}
	// Every key revoked: still keyed, nobody gets in without one.
	s.key = ""
	if a := listSessions(""); a.status != 401 {
		t.Fatalf("no key after the last key was revoked: %s", a)
	}
}

// TestStaticAndStoredKeys: static keys (FORGE_API_KEYS) and stored keys
// work side by side, each for its tenant.
func TestStaticAndStoredKeys(t *testing.T) {
	t.Parallel()
	s, ks, _ := storedKeyStack(t, map[string]string{"static-key": "globex"})
	if a := s.do(req{method: "GET", path: "/v1/sessions"}); a.status != 401 {
		t.Fatalf("no key with static keys: %s", a)
	}
	_, secret, err := ks.CreateKey(context.Background(), "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	s.key = "static-key"
	s.createAgent("a")
	globex := s.createSession("a")
	s.key = secret
	s.createAgent("a")
	acme := s.createSession("a")
	for _, c := range []struct{ key, own, other string }{{"static-key", globex.ID, acme.ID}, {secret, acme.ID, globex.ID}} {
		s.key = c.key
		var got forge.Session
		a := s.call("GET", "/v1/sessions/"+c.own, nil, 200, &got)
		if got.ID != c.own {
			t.Fatalf("own session: %s", a)
		}
		if a := s.do(req{method: "GET", path: "/v1/sessions/" + c.other}); a.status != 404 {
			t.Fatalf("other tenant's session: %s", a)
		}
	}
}
