package forge

import (
	"sort"
	"strings"
	"testing"
	"time"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func TestULIDGenSortsInCreationOrder(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	g := NewULIDGen(fixedClock{now})
	var ids []string
	for range 1000 {
		ids = append(ids, g.New(PrefixMessage))
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids made in the same millisecond are not sorted in creation order")
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "msg_") || len(id) != 4+26 {
			t.Fatalf("bad id %q", id)
		}
	}
	if got := IDTime(ids[0]); !got.Equal(now) {
		t.Fatalf("IDTime = %v, want %v", got, now)
	}
	later := NewULIDGen(fixedClock{now.Add(time.Millisecond)}).New(PrefixMessage)
	if later <= ids[len(ids)-1] {
		t.Fatalf("id from a later millisecond %q sorts before %q", later, ids[len(ids)-1])
	}
}
