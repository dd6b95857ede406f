package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/storetest"
)

// testOpts keeps each test's pool small: tests run in parallel against
// one server.
var testOpts = postgres.Options{MaxConns: 4}

func open(tb testing.TB, url string, opts postgres.Options) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), url, opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// urlOf remembers the database of each store the harness opened.
var urlOf sync.Map // forge.Store -> string

func TestConformance(t *testing.T) {
	pgtest.URL(t)
	t.Parallel()
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) forge.Store {
			url := pgtest.NewDatabase(t)
			s := open(t, url, testOpts)
			urlOf.Store(s, url)
			return s
		},
		Reopen: func(t *testing.T, s forge.Store) forge.Store {
			url, _ := urlOf.Load(s)
			if err := s.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			s2 := open(t, url.(string), testOpts)
			urlOf.Store(s2, url)
			return s2
		},
	})
}
