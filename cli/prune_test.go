package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/sqlite"
)

// TestPruneDeletesIdleSessionsAndTheirFiles: forge prune --older-than
// deletes the direct sessions idle longer, purges their rows and the files
// only they referenced, and keeps the rest; without --older-than it
// refuses.
func TestPruneDeletesIdleSessionsAndTheirFiles(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "forge.db")
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	ids := forge.NewULIDGen(nil)
	session := func(idle time.Duration) *forge.Session {
		at := time.Now().Add(-idle).UTC()
		s := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: forge.DefaultTenant, Kind: forge.KindDirect,
			Agent: "a", MainThreadID: ids.New(forge.PrefixThread), CreatedAt: at, UpdatedAt: at}
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	old, fresh := session(3*time.Hour), session(time.Minute)
	data := []byte("%PDF-1.4 prune")
	file := &forge.File{Tenant: forge.DefaultTenant, Filename: "a.pdf", MimeType: "application/pdf", Bytes: int64(len(data)),
		SHA256: sha(data)}
	if err := st.CreateFile(ctx, file, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	// The old session's one message references the file (a loose
	// message: no turn needed).
	m := &forge.Message{ID: ids.New(forge.PrefixMessage), Tenant: forge.DefaultTenant, SessionID: old.ID,
		ThreadID: old.MainThreadID, Role: forge.RoleUser, CreatedAt: time.Now().UTC()}
	fd, _ := json.Marshal(forge.FileData{FileID: file.ID, Filename: "a.pdf", MimeType: "application/pdf", Bytes: file.Bytes})
	m.Parts = []*forge.Part{{ID: ids.New(forge.PrefixPart), MessageID: m.ID, SessionID: old.ID, Type: forge.PartFile,
		State: forge.StateCompleted, Data: fd, CreatedAt: m.CreatedAt, UpdatedAt: m.CreatedAt}}
	if err := appendLoose(ctx, st, old, m); err != nil {
		t.Fatal(err)
	}
	_ = st.Close(ctx)

	if _, _, err := runCLI(t, "prune", "--db", db); err == nil || !strings.Contains(err.Error(), "--older-than") {
		t.Fatalf("prune without --older-than: %v", err)
	}
	out := mustCLI(t, "prune", "--db", db, "--older-than", "1h")
	if !strings.Contains(out, "deleted 1 sessions, purged 1") || !strings.Contains(out, "1 files") {
		t.Fatalf("prune said %q", out)
	}
	st, err = sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	if _, err := st.GetSession(ctx, forge.DefaultTenant, old.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("the idle session: %v", err)
	}
	if _, err := st.GetSession(ctx, forge.DefaultTenant, fresh.ID); err != nil {
		t.Fatalf("the fresh session: %v", err)
	}
	if _, err := st.GetFile(ctx, forge.DefaultTenant, file.ID); !errors.Is(err, forge.ErrNotFound) {
		t.Fatalf("the file only the idle session referenced: %v", err)
	}
}

func appendLoose(ctx context.Context, st *sqlite.Store, s *forge.Session, m *forge.Message) error {
	return st.AppendLoose(ctx, &forge.LooseAppend{Tenant: s.Tenant, SessionID: s.ID, Messages: []*forge.Message{m}})
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
