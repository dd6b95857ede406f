package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/forge-runtime/forge"
)

// KeyResolver resolves API keys the server's static Keys do not hold:
// keys kept in the store, which every replica sharing it sees at once
// (created, and revoked). Lookups are not cached.
type KeyResolver interface {
	// TenantForKey returns the tenant of a live key; an error wrapping
	// forge.ErrNotFound when there is none (unknown or revoked).
	TenantForKey(ctx context.Context, key string) (string, error)
	// HasKeys reports whether any live key exists.
	HasKeys(ctx context.Context) (bool, error)
}

// StoredKeys resolves keys through a forge.KeyStore (by their hash).
func StoredKeys(ks forge.KeyStore) KeyResolver { return storedKeys{ks} }

type storedKeys struct{ ks forge.KeyStore }

func (k storedKeys) TenantForKey(ctx context.Context, key string) (string, error) {
	ak, err := k.ks.KeyByHash(ctx, forge.HashAPIKey(key))
	if err != nil {
		return "", err
	}
	return ak.Tenant, nil
}

func (k storedKeys) HasKeys(ctx context.Context) (bool, error) { return k.ks.HasKeys(ctx) }

// keysConfigured reports whether requests need a key: the server has
// static keys, or the store has keys. Once true it stays true, so a server
// never falls back to running without keys because the last stored key
// was revoked.
func (s *Server) keysConfigured(ctx context.Context) (bool, error) {
	if s.keyed.Load() {
		return true, nil
	}
	if s.resolver == nil {
		return false, nil
	}
	// A keyless server asks the store at most once per keysRecheck, not on
	// every request: a key created meanwhile is required within that time.
	now := s.clock.Now().UnixNano()
	if last := s.keylessAt.Load(); last != 0 && now-last < int64(keysRecheck) {
		return false, nil
	}
	has, err := s.resolver.HasKeys(ctx)
	if err != nil {
		return false, err
	}
	if has {
		s.keyed.Store(true)
	} else {
		s.keylessAt.Store(now)
	}
	return has, nil
}

// keysRecheck is how long a keyless server trusts that the store still
// holds no key.
const keysRecheck = time.Second

// resolveKey returns the tenant of a bearer key the static keys do not
// know, "" when the resolver does not know it either.
func (s *Server) resolveKey(ctx context.Context, token string) (string, error) {
	if s.resolver == nil {
		return "", nil
	}
	tenant, err := s.resolver.TenantForKey(ctx, token)
	if errors.Is(err, forge.ErrNotFound) {
		return "", nil
	}
	return tenant, err
}
