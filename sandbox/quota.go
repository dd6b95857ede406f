package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// ErrOverQuota is wrapped by the file tools' errors when a write would take
// the workspace over its quota (Options.WorkspaceQuota).
var ErrOverQuota = errors.New("workspace quota exceeded")

// measureUsage walks work/ and home/ and sums the disk space of their
// files (allocated blocks, so a sparse file counts what it holds; a file
// with several links once), and records it.
func (s *Sandbox) measureUsage(ctx context.Context) (int64, error) {
	var total int64
	seen := map[[2]uint64]bool{}
	for _, root := range []string{s.dir, s.home()} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err != nil {
				return nil // vanished meanwhile, or unreadable: skipped
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				total += fi.Size()
				return nil
			}
			if st.Nlink > 1 && !fi.IsDir() {
				k := [2]uint64{uint64(st.Dev), st.Ino}
				if seen[k] {
					return nil
				}
				seen[k] = true
			}
			total += st.Blocks * 512
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	s.mu.Lock()
	s.usage = total
	s.mu.Unlock()
	return total, nil
}

// workspaceUsage is the last measured usage (measured now the first time);
// 0 without a quota.
func (s *Sandbox) workspaceUsage(ctx context.Context) (int64, error) {
	if s.m.opts.WorkspaceQuota <= 0 {
		return 0, nil
	}
	s.mu.Lock()
	u := s.usage
	s.mu.Unlock()
	if u >= 0 {
		return u, nil
	}
	return s.measureUsage(ctx)
}

// watchQuota measures the workspace while a command runs, every
// QuotaCheckInterval (or ten times as long as a measure takes, when that
// is longer), and sends the usage once it exceeds limit. stop ends the
// watch and waits for it; it may be called more than once.
func (s *Sandbox) watchQuota(limit int64) (exceeded <-chan int64, stop func()) {
	if s.m.opts.WorkspaceQuota <= 0 {
		return nil, func() {}
	}
	ch := make(chan int64, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait := s.m.opts.QuotaCheckInterval
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			start := time.Now()
			used, err := s.measureUsage(ctx)
			if err != nil {
				return
			}
			if used > limit {
				ch <- used
				return
			}
			wait = max(s.m.opts.QuotaCheckInterval, 10*time.Since(start))
		}
	}()
	return ch, func() { cancel(); <-done }
}

// reserveWrite is the file tools' quota check: it refuses a write that
// grows the workspace by delta bytes when the workspace is over its quota
// or would be after it, and otherwise counts the write in the usage.
func (s *Sandbox) reserveWrite(ctx context.Context, tool string, delta int64) error {
	quota := s.m.opts.WorkspaceQuota
	if quota <= 0 {
		return nil
	}
	used, err := s.workspaceUsage(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	if delta > 0 && used+delta > quota {
		if used > quota {
			return fmt.Errorf("%s: %w: work/ and home/ use %s of %s; delete files (for example with bash rm) before writing",
				tool, ErrOverQuota, FormatBytes(used), FormatBytes(quota))
		}
		return fmt.Errorf("%s: %w: this write of %s would take work/ and home/ from %s over the quota of %s; delete files first",
			tool, ErrOverQuota, FormatBytes(delta), FormatBytes(used), FormatBytes(quota))
	}
	s.mu.Lock()
	if s.usage >= 0 {
		s.usage = max(0, s.usage+delta)
	}
	s.mu.Unlock()
	return nil
}
