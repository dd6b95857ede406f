package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// TestPostgresOutageWithholdsWhatItCannotKeep (issue 22): PostgreSQL
// becomes unreachable while a reply streams over Redis, and stays so until
// the turn has given up its terminal write. What subscribers were shown
// of the reply is at most about one checkpoint interval ahead of what the
// store kept; before, they were shown everything streamed during the
// outage and the store kept only the last checkpoint.
func TestPostgresOutageWithholdsWhatItCannotKeep(t *testing.T) {
	c := newCluster(t, 30*time.Second)
	t.Parallel()
	proxy, url := pgtest.NewProxy(t, c.db)
	r := c.replicaOn(url)
	sess := c.setup(r)
	deltas := make([]string, 200)
	for i := range deltas {
		deltas[i] = "ab"
	}
	const gap = 5 * time.Millisecond
	c.model.push(reply{deltas: deltas, gap: gap})
	ctx, cancel := context.WithTimeout(c.ctx, 60*time.Second)
	defer cancel()
	turn, evs, err := r.eng.StreamTurn(ctx, forge.DefaultTenant, sess.ID, msg("go"))
	if err != nil {
		t.Fatal(err)
	}
	shown, n := 0, 0
	restored := make(chan struct{})
	for ev, err := range evs {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case forge.EventModelDelta:
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			shown += len(d.Delta)
			if n++; n == 60 {
				proxy.Cut()
				// Back once the turn has given up its writes (each
				// tried four times over 1.25 s, with margin): it then ends
				// store_error in a minimal write.
				back := time.Duration(len(deltas)-n)*gap + 8*time.Second
				go func() {
					defer close(restored)
					time.Sleep(back)
					proxy.Restore()
				}()
			}
		}
		if ev.Type == forge.EventTurnDone {
			break
		}
	}
	<-restored
	turn = c.wait(r, sess.ID, turn.ID)
	if turn.Status != forge.TurnErrored || turn.Error == nil || turn.Error.Code != forge.CodeStoreError {
		t.Fatalf("turn %+v %+v: the outage did not outlast the turn", turn, turn.Error)
	}
	kept := keptReply(t, r.store, sess.ID, turn.ID)
	// Shown beyond kept: what streamed in 1.25 checkpoint intervals (the
	// cluster's 50 ms) at 2 characters a gap, three times over for a
	// loaded machine. Before the fix: everything after the last
	// checkpoint before the cut, about 280 characters.
	bound := 3 * 2 * int((50*time.Millisecond+50*time.Millisecond/4)/gap)
	if kept >= 400 || shown-kept > bound {
		t.Fatalf("shown %d characters, kept %d of 400: %d shown and lost (at most %d)", shown, kept, shown-kept, bound)
	}
	t.Logf("shown %d, kept %d of 400", shown, kept)
}
