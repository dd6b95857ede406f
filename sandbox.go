package forge

import (
	"context"
	"time"
)

// Sandbox is a session's working directory as the engine uses it: the
// tools that act in it, and the changes a step made to its files. The
// sandbox package provides it.
type Sandbox interface {
	// Dir is the working directory the sandbox's tools act in.
	Dir() string
	// Tools are the tools that act in the sandbox.
	Tools() []Tool
	// Track records the state of the files and returns a func that reports
	// what changed since then (an empty Patch when nothing did). Both stop
	// early with the context's error when their context ends (a cancelled
	// turn), so a workspace of any size costs a cancel little.
	Track(ctx context.Context) (changes func(ctx context.Context) (Patch, error), err error)
}

// Patch is what a step changed in a sandbox's files: the data of a patch
// part.
type Patch struct {
	Files []FileChange `json:"files"`
	// Partial is set when the sandbox stopped looking at files past its
	// limit.
	Partial bool `json:"partial,omitempty"`
}

// Empty reports whether nothing changed.
func (p Patch) Empty() bool { return len(p.Files) == 0 }

// FileChange is one changed file. Added and Removed count lines; they are
// zero for binary files and for files too large to count.
type FileChange struct {
	Path     string `json:"path"`
	Status   string `json:"status"` // added, modified or deleted
	Added    int    `json:"added"`
	Removed  int    `json:"removed"`
	Binary   bool   `json:"binary,omitempty"`
	TooLarge bool   `json:"too_large,omitempty"`
}

// SnapshotSandbox is a Sandbox that keeps restorable snapshots of its
// files (the sandbox package's does).
type SnapshotSandbox interface {
	Sandbox
	// TrackSnapshot is Track whose changes func, when the step changed
	// files, also keeps a restorable snapshot of the files as it found
	// them, named by newID (called only then). A snapshot that cannot be
	// kept is no error: the snapshot is nil (or partial), the Patch stands.
	TrackSnapshot(ctx context.Context) (changes func(ctx context.Context, newID func() string) (Patch, *WorkspaceSnapshot, error), err error)
	// LatestSnapshot is the snapshot the files were last saved as or
	// restored to (nil: none yet).
	LatestSnapshot() *WorkspaceSnapshot
}

// WorkspaceSnapshot names a restorable state of a sandbox's files.
type WorkspaceSnapshot struct {
	ID string `json:"id"`
	// Files is how many files (and symlinks) it holds.
	Files int `json:"files"`
	// Partial: some files could not be kept (larger than the sandbox
	// keeps, past its read budget or its store's room, or past the files a
	// snapshot records); a restore leaves those as they are.
	Partial bool `json:"partial,omitempty"`
}

// WorkspaceSnapshotInfo is one workspace snapshot a session's sandbox
// keeps (GET /v1/sessions/{id}/sandbox/snapshots).
type WorkspaceSnapshotInfo struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
}

// WorkspaceRestore is what restoring a workspace snapshot did.
type WorkspaceRestore struct {
	Snapshot string `json:"snapshot"`
	// Partial: the snapshot is partial, so some files were left as they
	// are.
	Partial bool `json:"partial"`
	// Written and Removed count the files (and symlinks) rewritten and
	// the files and directories removed.
	Written int `json:"written"`
	Removed int `json:"removed"`
}

// SandboxInfo is the sandbox's part of a turn snapshot (Snapshot.Extra
// "sandbox"): facts that do not depend on where the server keeps it.
type SandboxInfo struct {
	// Isolated: commands run process-isolated (bubblewrap).
	Isolated bool `json:"isolated"`
	// Snapshot is the workspace snapshot the files were last saved as or
	// restored to when the turn ended; SnapshotPartial says it is partial.
	Snapshot        string `json:"snapshot,omitempty"`
	SnapshotPartial bool   `json:"snapshot_partial,omitempty"`
}
