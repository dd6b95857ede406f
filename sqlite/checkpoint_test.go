package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

// openWith opens a store in a temporary directory with changed settings.
func openWith(t *testing.T, configure func(*Store)) *Store {
	t.Helper()
	s, err := openStore(context.Background(), filepath.Join(t.TempDir(), "forge.db"), configure)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// walFrames returns the frames in the store's log, from a connection of
// the test's own, with a checkpoint of the given mode (default PASSIVE).
func walFrames(t testing.TB, s *Store, mode ...string) int64 {
	t.Helper()
	m := "PASSIVE"
	if len(mode) > 0 {
		m = mode[0]
	}
	db, err := sql.Open("sqlite", s.path+"?_pragma=busy_timeout(10000)&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var busy, frames, copied int64
	if err := db.QueryRow("PRAGMA wal_checkpoint("+m+")").Scan(&busy, &frames, &copied); err != nil {
		t.Fatal(err)
	}
	return frames
}

// sessions creates n sessions, each in its own write transaction.
func sessions(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := range n {
		if err := s.CreateSession(context.Background(), &forge.Session{Tenant: "t", Agent: "a", Title: fmt.Sprint("s", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNoConnectionCheckpointsByItself: neither the writer nor a reader
// checkpoints when a commit crosses a threshold (SQLite's default, 1000
// pages, made one commit in a few hundred wait for the copy and two
// fsyncs); the checkpointer does.
func TestNoConnectionCheckpointsByItself(t *testing.T) {
	t.Parallel()
	s := openT(t)
	var writer, sizeLimit int64
	err := s.write(context.Background(), func(x *tx) error {
		if err := x.queryRow("PRAGMA wal_autocheckpoint").Scan(&writer); err != nil {
			return err
		}
		return x.queryRow("PRAGMA journal_size_limit").Scan(&sizeLimit)
	})
	if err != nil {
		t.Fatal(err)
	}
	var reader int64
	if err := s.queryRow(context.Background(), "PRAGMA wal_autocheckpoint").Scan(&reader); err != nil {
		t.Fatal(err)
	}
	if writer != 0 || reader != 0 {
		t.Errorf("wal_autocheckpoint: writer %d, reader %d; want 0 (the checkpointer's job)", writer, reader)
	}
	if sizeLimit != walSizeLimit {
		t.Errorf("journal_size_limit %d, want %d", sizeLimit, walSizeLimit)
	}
}

// TestCheckpointerRestartsTheLog: after the writer's commits the
// checkpointer copies the log into the database, so that the next write
// starts the log over instead of growing it.
func TestCheckpointerRestartsTheLog(t *testing.T) {
	t.Parallel()
	rounds := make(chan struct{}, 1)
	s := openWith(t, func(s *Store) {
		s.checkpointInterval = time.Millisecond
		s.afterCheckpoint = func() {
			select {
			case rounds <- struct{}{}:
			default:
			}
		}
	})
	sessions(t, s, 300)
	// The commits kicked the checkpointer: it runs by itself.
	<-rounds
	if p := s.cp.passives.Load(); p < 1 {
		t.Fatalf("%d passive checkpoints", p)
	}
	if err := s.cp.lastErr.Load(); err != nil {
		t.Fatalf("checkpoint error: %v", *err)
	}
	// A round that surely began after the last commit.
	if err := s.cp.round(); err != nil {
		t.Fatal(err)
	}
	sessions(t, s, 1)
	if n := walFrames(t, s); n > 20 {
		t.Errorf("the log holds %d frames after 301 commits and a checkpoint; want it started over (a few frames)", n)
	}
}

// TestCheckpointerRestartsALongLog: a reader that keeps an old snapshot
// stops the log from starting over by itself; past restartFrames the
// checkpointer runs a RESTART checkpoint, which gives up (without blocking
// the writer for longer than its busy timeout) while the reader holds on,
// and makes the next write start the log over once it has let go.
func TestCheckpointerRestartsALongLog(t *testing.T) {
	t.Parallel()
	s := openWith(t, func(s *Store) {
		s.checkpointInterval = time.Hour // rounds run when the test says
		s.restartFrames = 50
	})
	ctx := context.Background()
	sessions(t, s, 1)
	pinned, release := make(chan struct{}), make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		readerDone <- s.read(ctx, func(x *tx) error {
			var n int
			if err := x.queryRow("SELECT count(*) FROM sessions").Scan(&n); err != nil {
				return err
			}
			close(pinned)
			<-release
			return nil
		})
	}()
	<-pinned
	sessions(t, s, 200)
	if n := walFrames(t, s); n < 50 {
		t.Fatalf("the log holds %d frames; the test needs more than restartFrames", n)
	}
	if err := s.cp.round(); err != nil {
		t.Fatal(err)
	}
	if n := s.cp.restarts.Load(); n != 0 {
		t.Fatalf("%d RESTART checkpoints completed while a reader held an old snapshot", n)
	}
	// The writer was not left waiting.
	sessions(t, s, 1)
	close(release)
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	if err := s.cp.round(); err != nil {
		t.Fatal(err)
	}
	if n := s.cp.restarts.Load(); n != 1 {
		t.Fatalf("%d RESTART checkpoints, want 1", n)
	}
	sessions(t, s, 1)
	if n := walFrames(t, s); n > 20 {
		t.Errorf("the log holds %d frames after a RESTART and one write; want it started over", n)
	}
	// Nothing was lost on the way.
	var n int
	if err := s.queryRow(ctx, "SELECT count(*) FROM sessions").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 203 {
		t.Errorf("%d sessions, want 203", n)
	}
}

// TestCloseStopsCheckpointer: Close ends the checkpointer's goroutine.
func TestCloseStopsCheckpointer(t *testing.T) {
	t.Parallel()
	s := openT(t)
	sessions(t, s, 3)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.cp.done:
	default:
		t.Fatal("the checkpointer still runs after Close")
	}
}
