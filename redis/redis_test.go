package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus/bustest"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// open returns a Bus with a prefix of its own, closed when t ends.
func open(t *testing.T, prefix string, o redis.Options) *redis.Bus {
	t.Helper()
	o.Prefix = prefix
	b, err := redis.Open(context.Background(), redistest.URL(t), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func TestConformance(t *testing.T) {
	redistest.URL(t)
	t.Parallel()
	bustest.Run(t, func(t *testing.T, o bustest.Options) forge.Bus {
		return open(t, redistest.Prefix(t), redis.Options{Buffer: o.Buffer, MaxLen: o.BacklogMax, Retention: time.Minute})
	})
}
