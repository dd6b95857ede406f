package redis_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/redis"
	"github.com/forge-runtime/forge/redis/redistest"
)

// TestUnheldPublishesGoInGroups: unheld publishes of several sessions made
// while one is on the wire go in one script call, and each session is
// published or refused on its own, as it would be alone: the ones this
// process wrote last are published, a session another process wrote
// since is stale, one it holds is busy, a delta of an ended turn is
// refused.
func TestUnheldPublishesGoInGroups(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	a := open(t, prefix, redis.Options{WriterID: "a"})
	b := open(t, prefix, redis.Options{WriterID: "b"})

	const fresh = 5
	var sessions []string
	for i := range fresh {
		sessions = append(sessions, fmt.Sprintf("ses_%d", i))
	}
	sessions = append(sessions, "ses_stale", "ses_busy", "ses_ended")
	for _, s := range sessions {
		h, _, err := a.Acquire(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		evs := []forge.Event{stored(s, "turn_1", forge.EventTurnCreated, 1)}
		if s == "ses_ended" {
			evs = append(evs, stored(s, "turn_1", forge.EventTurnDone, 2))
		}
		if err := a.Release(ctx, s, h, evs); err != nil {
			t.Fatal(err)
		}
	}
	h, _, err := b.Acquire(ctx, "ses_stale")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "ses_stale", h, []forge.Event{stored("ses_stale", "turn_1", forge.EventMessageCreated, 1025)}); err != nil {
		t.Fatal(err)
	}
	holdB, _, err := b.Acquire(ctx, "ses_busy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Release(ctx, "ses_busy", holdB, nil) }()

	// The first publish leads a group of one and waits, inside its hook,
	// until every other publish has queued behind it.
	var mu sync.Mutex
	var sizes []int
	first := make(chan struct{})
	var once sync.Once
	redis.SetOnGroup(a, func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		once.Do(func() { <-first })
	})
	type outcome struct {
		ok  bool
		err error
	}
	results := make([]outcome, len(sessions))
	var wg sync.WaitGroup
	publish := func(i int) {
		s := sessions[i]
		evs := []forge.Event{delta(s, "turn_1", 3, s+" one"), delta(s, "turn_1", 4, s+" two")}
		ok, err := a.PublishUnheld(ctx, evs...)
		results[i] = outcome{ok, err}
	}
	wg.Go(func() { publish(0) })
	for redis.QueuedUnheld(a, sessions[0]) != 0 || len(groupSizes(&mu, &sizes)) == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < len(sessions); i++ {
		wg.Go(func() { publish(i) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for redis.QueuedUnheld(a, sessions[0]) < len(sessions)-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d publishes queued, want %d", redis.QueuedUnheld(a, sessions[0]), len(sessions)-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(first)
	wg.Wait()

	if got := groupSizes(&mu, &sizes); len(got) != 2 || got[0] != 1 || got[1] != len(sessions)-1 {
		t.Fatalf("group sizes %v, want [1 %d]", got, len(sessions)-1)
	}
	for i, s := range sessions {
		r := results[i]
		switch s {
		case "ses_stale", "ses_busy":
			if r.ok || r.err != nil {
				t.Errorf("%s: ok=%v err=%v, want a hold needed", s, r.ok, r.err)
			}
		case "ses_ended":
			if !errors.Is(r.err, forge.ErrTurnEnded) {
				t.Errorf("%s: ok=%v err=%v, want ErrTurnEnded", s, r.ok, r.err)
			}
		default:
			if !r.ok || r.err != nil {
				t.Errorf("%s: ok=%v err=%v, want published", s, r.ok, r.err)
			}
		}
	}
	// What was published is in each stream, in order; what was refused
	// is not.
	for _, s := range sessions {
		held, sub, err := a.Subscribe(ctx, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		sub.Close()
		var texts []string
		for _, ev := range held {
			if ev.Type == forge.EventModelDelta {
				var d forge.DeltaData
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					t.Fatal(err)
				}
				texts = append(texts, fmt.Sprint(ev.Seq, " ", d.Delta))
			}
		}
		want := fmt.Sprint([]string{"3 " + s + " one", "4 " + s + " two"})
		if s == "ses_stale" || s == "ses_busy" || s == "ses_ended" {
			want = "[]"
		}
		if fmt.Sprint(texts) != want {
			t.Errorf("%s: deltas kept %v, want %s", s, texts, want)
		}
	}
}

func groupSizes(mu *sync.Mutex, sizes *[]int) []int {
	mu.Lock()
	defer mu.Unlock()
	return append([]int(nil), *sizes...)
}

// TestGroupWaitsForCompanyOnlyAfterCompany: once a group had company, the
// next leader waits GroupWait for other sessions' publishes to join it;
// after a group of one, a lone publish is sent at once.
func TestGroupWaitsForCompanyOnlyAfterCompany(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := open(t, redistest.Prefix(t), redis.Options{WriterID: "a", GroupWait: time.Second})
	sessions := []string{"ses_a", "ses_b", "ses_c"}
	seq := map[string]int64{}
	for _, s := range sessions {
		h, _, err := a.Acquire(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx, s, h, []forge.Event{stored(s, "turn_1", forge.EventTurnCreated, 1)}); err != nil {
			t.Fatal(err)
		}
		seq[s] = 1
	}
	var mu sync.Mutex
	var sizes []int
	redis.SetOnGroup(a, func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	})
	var seqMu sync.Mutex
	publish := func(s string) {
		seqMu.Lock()
		seq[s]++
		n := seq[s]
		seqMu.Unlock()
		if ok, err := a.PublishUnheld(ctx, delta(s, "turn_1", n, "x")); !ok || err != nil {
			t.Errorf("%s: ok=%v err=%v", s, ok, err)
		}
	}
	// Alone: sent at once, a group of one each time.
	publish("ses_a")
	publish("ses_a")
	// Two at once: the second waits behind the first (a group of one,
	// sent at once), or both go together.
	var wg sync.WaitGroup
	release := make(chan struct{})
	var once sync.Once
	redis.SetOnGroup(a, func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		once.Do(func() { <-release })
	})
	wg.Go(func() { publish("ses_a") })
	for len(groupSizes(&mu, &sizes)) < 3 {
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() { publish("ses_b") })
	wg.Go(func() { publish("ses_c") })
	for redis.QueuedUnheld(a, "ses_b") < 2 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	// The last group had company: the next leader waits, and a publish
	// made meanwhile joins it.
	wg.Go(func() { publish("ses_a") })
	for redis.QueuedUnheld(a, "ses_a") < 1 {
		time.Sleep(time.Millisecond)
	}
	wg.Go(func() { publish("ses_b") })
	wg.Wait()
	if got := fmt.Sprint(groupSizes(&mu, &sizes)); got != "[1 1 1 2 2]" {
		t.Fatalf("group sizes %s, want [1 1 1 2 2]", got)
	}
}

// TestGroupFailsEachOfItsSessions: when the server is down, every session
// of a group learns that its publish failed (none is told it was
// published), and once the server is back their next publishes land.
func TestGroupFailsEachOfItsSessions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := redistest.Own(t)
	a, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: redistest.Prefix(t), WriterID: "a", GroupWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	sessions := []string{"ses_a", "ses_b", "ses_c"}
	for _, s := range sessions {
		h, _, err := a.Acquire(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx, s, h, []forge.Event{stored(s, "turn_1", forge.EventTurnCreated, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var sizes []int
	release := make(chan struct{})
	var once sync.Once
	redis.SetOnGroup(a, func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		once.Do(func() { <-release })
	})
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() {
			ok, err := a.PublishUnheld(ctx, delta(s, "turn_1", 2, "x"))
			if ok {
				t.Errorf("%s: published while the server was down", s)
			}
			errs[i] = err
		})
		if i == 0 {
			for len(groupSizes(&mu, &sizes)) == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}
	for redis.QueuedUnheld(a, "ses_a") < len(sessions)-1 {
		time.Sleep(time.Millisecond)
	}
	srv.Stop()
	close(release)
	wg.Wait()
	if got := fmt.Sprint(groupSizes(&mu, &sizes)); got != "[1 2]" {
		t.Fatalf("group sizes %s, want [1 2]", got)
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("%s: no error while the server was down", sessions[i])
		}
	}
	srv.Start()
	for _, s := range sessions {
		var ok bool
		var err error
		for range 50 { // the pool redials
			if ok, err = a.PublishUnheld(ctx, delta(s, "turn_1", 2, "x")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !ok || err != nil {
			t.Errorf("%s after the restart: ok=%v err=%v", s, ok, err)
		}
	}
}
