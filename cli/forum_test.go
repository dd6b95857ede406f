package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/bus"
	"github.com/forge-runtime/forge/client"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/forum"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/scripted"
	"github.com/forge-runtime/forge/sqlite"
)

// realServer runs the HTTP API with SQLite, the engine, the forum layer
// and the scripted model (it echoes the last user message).
func realServer(t *testing.T) *httptest.Server {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/forge.db")
	if err != nil {
		t.Fatal(err)
	}
	models := provider.NewRegistry()
	models.Register(scripted.ProviderName, func(model string) (forge.Model, error) { return scripted.New(model), nil })
	log := slog.New(slog.DiscardHandler)
	ids := forge.NewULIDGen(nil)
	eng := engine.New(engine.Config{Store: st, Models: models, Bus: bus.New(0, 0), Logger: log, IDs: ids, Kinds: forum.Kinds()})
	forums := forum.New(forum.Config{Store: st, Engine: eng, Models: models, Logger: log, IDs: ids})
	if err := forums.Open(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: st, Engine: eng, Forums: forums, Logger: log}).Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = forums.Close(ctx)
		_ = eng.Close(ctx)
		_ = st.Close(ctx)
	})
	return srv
}

func TestForumTalksFromATerminal(t *testing.T) {
	t.Parallel()
	srv := realServer(t)
	c := testClient(t, srv.URL)
	ctx := context.Background()
	if _, err := c.CreateAgent(ctx, &forge.Agent{Name: "support", Model: "scripted/echo"}); err != nil {
		t.Fatal(err)
	}
	in, typed := io.Pipe()
	out := &syncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- runForum(ctx, c, in, out, forumOptions{title: "desk", as: "alice", agents: []string{"support=always"}})
	}()
	waitFor(t, out, "you are alice")
	waitFor(t, out, "* support joined")
	if _, err := io.WriteString(typed, "where is my order?\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "alice: where is my order?")
	waitFor(t, out, "… support is typing")
	waitFor(t, out, "support: echo: alice: where is my order?")
	if _, err := io.WriteString(typed, "/members\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "members: alice, support (agent, always)")
	if _, err := io.WriteString(typed, "/quit\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("forum did not exit:\n%s", out)
	}
	// The room kept everything: a second terminal joining it sees the
	// history, and a member already present is not added twice.
	forums, err := c.ListForums(ctx, client.ListOptions{})
	if err != nil || len(forums.Data) != 1 {
		t.Fatalf("forums %v %v", forums, err)
	}
	out2 := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runForum(ctx, c, strings.NewReader("/quit\n"), out2, forumOptions{forum: forums.Data[0].ID, as: "alice", agents: []string{"support"}})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out2.String(), "forge forum "+forums.Data[0].ID) {
		t.Fatalf("second terminal:\n%s", out2)
	}
	// Bad input is refused clearly.
	err = runForum(ctx, c, strings.NewReader(""), &syncBuffer{}, forumOptions{forum: "ses_nope", as: "bob"})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("unknown forum: %v", err)
	}
}
