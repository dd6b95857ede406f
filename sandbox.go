package forge

import "context"

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
