// Package redistest gives tests a Redis of their own: a key prefix on the
// server FORGE_TEST_REDIS_URL names, so that parallel tests (and several
// Forge processes of one test) share a server without seeing each other's
// keys.
//
// Unset, tests are skipped, unless FORGE_TEST_REQUIRE_SERVICES=1, which
// makes them fail (internal/testenv; scripts/test starts a Redis and sets
// both).
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/forge-runtime/forge/internal/testenv"
)

// Env names the variables redistest reads (internal/testenv's).
const (
	EnvURL     = testenv.RedisEnv
	EnvRequire = testenv.RequireEnv
)

// URL returns the test server's URL, or skips (fails, with
// FORGE_TEST_REQUIRE_SERVICES=1) when there is none (testenv.RedisURL).
func URL(tb testing.TB) string {
	tb.Helper()
	return testenv.RedisURL(tb)
}

// Prefix returns a key prefix no other test uses; its keys are deleted
// when tb ends.
func Prefix(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "forgetest-" + hex.EncodeToString(b)
	url := URL(tb)
	tb.Cleanup(func() {
		opts, err := goredis.ParseURL(url)
		if err != nil {
			return
		}
		c := goredis.NewClient(opts)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			_ = c.Del(ctx, keys...).Err()
		}
	})
	return prefix
}

// Client returns a client of the test server, closed when tb ends.
func Client(tb testing.TB) *goredis.Client {
	tb.Helper()
	opts, err := goredis.ParseURL(URL(tb))
	if err != nil {
		tb.Fatalf("%s: %v", EnvURL, err)
	}
	c := goredis.NewClient(opts)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
