package forum_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// TestJoinsRacingDeleteForum: agent joins race DeleteForum; each join
// either is ended by the delete or fails with not_found, so once both
// returned no stint of the deleted forum is active.
func TestJoinsRacingDeleteForum(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/forge.db"
	n := openNode(t, db, nil)
	defer n.close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const agents = 12
	for i := range agents {
		if err := n.st.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: fmt.Sprint("a", i), Model: "scripted/echo"}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := sql.Open("sqlite", "file:"+db+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for round := range 5 {
		f, err := n.forums.CreateForum(ctx, tenant, "room", nil, forge.DefaultForumGuards())
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range agents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := n.forums.Join(ctx, tenant, f.ID, forge.Actor{Type: forge.ActorAgent, Agent: fmt.Sprint("a", i)}, "")
				if err != nil && forge.ErrorCode(err) != "not_found" {
					t.Errorf("round %d: join: %v, want success or not_found", round, err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := n.forums.DeleteForum(ctx, tenant, f.ID); err != nil {
				t.Errorf("round %d: delete: %v", round, err)
			}
		}()
		close(start)
		wg.Wait()
		var active int
		if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM participants WHERE session_id = ? AND left_at IS NULL`, f.ID).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if active != 0 {
			t.Fatalf("round %d: %d stints of the deleted forum are active", round, active)
		}
	}
}
