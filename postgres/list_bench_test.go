package postgres_test

import (
	"fmt"
	"testing"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/storetest"
)

// BenchmarkListMessages lists a session of 10,000 messages (5,000 trivial
// turns of two) to its end, with the default page, a large one and the
// largest: a page must cost what it returns, not the branch before it.
//
//	./scripts/test ./postgres/ -run '^$' -bench ListMessages -benchtime 3x
func BenchmarkListMessages(b *testing.B) {
	for _, limit := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("msgs=10000/limit=%d", limit), func(b *testing.B) {
			s := open(b, pgtest.NewDatabase(b), testOpts)
			storetest.BenchListMessages(b, s, 10_000, 2, limit)
		})
	}
}
