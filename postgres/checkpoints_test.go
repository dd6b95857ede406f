package postgres_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

// TestCheckpointsAreWrittenInGroups: checkpoints queued while one is being
// written go together in the next transaction; a fenced one among them
// (its turn ended) fails alone and the others land.
func TestCheckpointsAreWrittenInGroups(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.NewDatabase(t), postgres.Options{MaxConns: 8})
	ids := forge.NewULIDGen(nil)
	const tenant = "acme"
	if err := s.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: "a", Model: "openai/x"}); err != nil {
		t.Fatal(err)
	}
	type streaming struct {
		turn *forge.Turn
		part *forge.Part
	}
	var all []streaming
	for range 10 {
		ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Agent: "a", MainThreadID: ids.New(forge.PrefixThread)}
		if err := s.CreateSession(ctx, ses); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		turn := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: tenant, SessionID: ses.ID, Status: forge.TurnRunning, CreatedAt: now}
		m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: tenant, SessionID: ses.ID, TurnID: turn.ID,
			ThreadID: ses.MainThreadID, Role: forge.RoleAssistant, CreatedAt: now}
		p := &forge.Part{ID: ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: ses.ID, TurnID: turn.ID,
			Type: forge.PartText, State: forge.StateStreaming, CreatedAt: now, UpdatedAt: now}
		m.Parts = []*forge.Part{p}
		if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, Messages: []*forge.Message{m}}); err != nil {
			t.Fatal(err)
		}
		all = append(all, streaming{turn, p})
	}
	checkpoint := func(st streaming, text string) error {
		row := st.part.Clone()
		row.Text = text
		return s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: st.turn.SessionID, TurnID: st.turn.ID, Parts: []*forge.Part{row}})
	}
	// Turn 5 ends: its checkpoint is fenced out.
	ended := *all[5].turn
	ended.Status, ended.EndedAt = forge.TurnDone, ptr(time.Now().UTC())
	if err := s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: ended.SessionID, TurnID: ended.ID, Turn: &ended}); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	var mu sync.Mutex
	var groups []int
	postgres.OnCheckpointGroup(s, func(n int) {
		mu.Lock()
		first := len(groups) == 0
		groups = append(groups, n)
		mu.Unlock()
		if first {
			<-release // the others queue meanwhile
		}
	})
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = checkpoint(all[0], "so far 0") }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		started := len(groups) > 0
		mu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint group was written")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < len(all); i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = checkpoint(all[i], fmt.Sprintf("so far %d", i)) }()
	}
	for postgres.QueuedCheckpoints(s) < len(all)-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints queued behind the first, want %d", postgres.QueuedCheckpoints(s), len(all)-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if fmt.Sprint(groups) != "[1 9]" {
		t.Fatalf("groups %v, want [1 9]", groups)
	}
	for i, err := range errs {
		if i == 5 {
			if !errors.Is(err, forge.ErrTurnEnded) {
				t.Fatalf("the ended turn's checkpoint: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		ms, _, err := s.ListMessages(ctx, tenant, forge.MessageQuery{SessionID: all[i].turn.SessionID, TipTurnID: all[i].turn.ID})
		if err != nil || len(ms) != 1 || len(ms[0].Parts) != 1 || ms[0].Parts[0].Text != fmt.Sprintf("so far %d", i) {
			t.Fatalf("turn %d's rows: %v %+v", i, err, ms)
		}
	}
}
