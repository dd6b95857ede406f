package sqlite_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/forge-runtime/forge/storetest"
)

// BenchmarkListMessages lists a session of 10,000 messages (5,000 trivial
// turns of two) to its end, with the default page, a large one and the
// largest: a page must cost what it returns, not the branch before it.
//
//	go test -run '^$' -bench ListMessages -benchtime 3x ./sqlite/
func BenchmarkListMessages(b *testing.B) {
	for _, limit := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("msgs=10000/limit=%d", limit), func(b *testing.B) {
			s := open(b, filepath.Join(b.TempDir(), "forge.db"))
			storetest.BenchListMessages(b, s, 10_000, 2, limit)
		})
	}
}
