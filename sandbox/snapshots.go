package sandbox

// Workspace snapshots: after a step that changed files, the engine asks
// for a restorable snapshot of the work directory (TrackSnapshot). It is
// kept in <base>/snapshots/, beside work/ and never inside it: bubblewrap
// binds only work/ and home/, and the directory is the server's (0700), so
// a command can neither see nor change a snapshot.
//
//	snapshots/blobs/ab/abcdef…   file contents, named by their sha256
//	snapshots/manifests/<id>   path -> hash, size, mode, metadata; symlinks; directories (manifest.go):
//	                           whole, or a delta of the newest whole one (<id>.base once pruned)
//	snapshots/HEAD   after a restore, the id restored to (otherwise the newest is the head)
//
// Snapshots of a session share blobs. A manifest is built from the previous
// one and the step's walk of the files (the one its patch needed): a file
// whose size, mode, times and inode are those of the previous manifest's
// entry (a write changes its ctime, which no program can set back), or
// whose content the walk hashed to a blob already kept, takes that entry
// without being read. Only the files the step changed are read and
// stored.
//
// Limits: a file larger than LineCountMaxSize is not kept, a snapshot
// reads at most SnapshotHashBytes of new content, and the store (blobs and
// manifests) stays within WorkspaceQuota, the oldest snapshots being pruned
// first to make room; a file that cannot be kept is listed as skipped and
// the snapshot is partial. A walk stopped at MaxSnapshotFiles makes it
// partial too (truncated: a restore then removes no file, since it cannot
// tell which ones came later). At most MaxSnapshots are kept. .git
// directories are never snapshotted nor touched by a restore.

import (
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/forge-runtime/forge"
)

// snapshotIDPattern is what a snapshot id may look like: it names a file,
// so no dot and no separator.
var snapshotIDPattern = regexp.MustCompile(`^snap_[A-Za-z0-9_-]{1,100}$`)

// snapStore is one sandbox's snapshots.
type snapStore struct {
	dir string // <base>/snapshots

	mu     sync.Mutex // guards the following; held for a whole save, restore or prune
	loaded bool
	list   []snapRef // oldest first
	// refs counts the manifest entries holding each blob (by hex hash);
	// a blob is on disk exactly while its count is above zero.
	refs     map[string]int
	blobSize map[string]int64
	bytes    int64 // blobs and manifests on disk
	// head is the manifest the files were last saved as or restored to
	// (with the metadata they had then); nil before the first.
	head *manifest
	seq  int64
	// headFile: HEAD names the head (written by a restore; a new
	// snapshot deletes it, the newest being the head then).
	headFile bool
	// base is the newest whole manifest: the next snapshot is written as
	// a delta of it while it differs little. hidden are whole manifests
	// pruned as snapshots but kept (<id>.base, with their sizes) for the
	// deltas standing on them; cache the last whole one read.
	base   *manifest
	hidden map[string]int64
	cache  []*manifest
}

type snapRef struct {
	id    string
	seq   int64
	bytes int64  // the manifest file's size
	base  string // the whole manifest it is a delta of ("": whole)
}

// manifest is one snapshot: every file of the work directory (outside
// .git) and every directory.
type manifest struct {
	ID    string
	Seq   int64
	Files map[string]*entry
	Dirs  map[string]uint32
	// Skipped are files that were there but could not be kept: a restore
	// leaves them as they are.
	Skipped []string
	// Truncated: the walk stopped at MaxSnapshotFiles.
	Truncated bool
	Partial   bool
	// Base is the whole manifest this one is stored as a delta of ("":
	// stored whole); goneFiles and goneDirs are a decoded delta's
	// removals (applyDelta).
	Base                string
	goneFiles, goneDirs []string
}

// entry is a regular file (Hash) or a symlink (Link). Entries are shared
// between manifests in memory and never changed once made.
type entry struct {
	Hash string
	Size int64
	Mode uint32
	Link string
	// Meta is mtime, ctime, device and inode as the file had them: the
	// next manifest reuses the entry while they hold.
	Meta [4]int64
}

func metaKey(m fileMeta) [4]int64 {
	return [4]int64{m.mtime, m.ctime, int64(m.dev), int64(m.ino)}
}

func newSnapStore(base string) *snapStore {
	return &snapStore{dir: filepath.Join(base, "snapshots")}
}

func (st *snapStore) blobPath(h string) string {
	return filepath.Join(st.dir, "blobs", h[:2], h)
}

func (st *snapStore) manifestPath(id string) string {
	return filepath.Join(st.dir, "manifests", id)
}

// load reads the store once (st.mu held): the manifests' references, the
// head, the base for the next delta and the blobs' sizes; blobs no
// manifest holds (a crash's leftovers), bases no delta needs and temporary
// files are deleted.
func (st *snapStore) load() error {
	if st.loaded {
		return nil
	}
	for _, d := range []string{st.dir, filepath.Join(st.dir, "blobs"), filepath.Join(st.dir, "manifests")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("sandbox: snapshots: %w", err)
		}
	}
	st.refs, st.blobSize, st.hidden = map[string]int{}, map[string]int64{}, map[string]int64{}
	st.list, st.bytes, st.head, st.base, st.cache = nil, 0, nil, nil, nil
	headID := ""
	st.headFile = false
	if b, err := os.ReadFile(filepath.Join(st.dir, "HEAD")); err == nil {
		headID, st.headFile = strings.TrimSpace(string(b)), true
	}
	ents, err := os.ReadDir(filepath.Join(st.dir, "manifests"))
	if err != nil {
		return fmt.Errorf("sandbox: snapshots: %w", err)
	}
	raw := map[string]*manifest{}
	sizes := map[string]int64{}
	var hidden []string
	for _, de := range ents {
		name := de.Name()
		id, isBase := strings.CutSuffix(name, ".base")
		if !snapshotIDPattern.MatchString(id) {
			_ = os.Remove(filepath.Join(st.dir, "manifests", name))
			continue
		}
		data, err := os.ReadFile(filepath.Join(st.dir, "manifests", name))
		var m *manifest
		if err == nil {
			m, err = decodeManifest(data)
		}
		if err != nil || m.ID != id || (isBase && m.Base != "") {
			_ = os.Remove(filepath.Join(st.dir, "manifests", name)) // unreadable: not restorable
			continue
		}
		raw[id], sizes[id] = m, int64(len(data))
		if isBase {
			hidden = append(hidden, id)
		}
	}
	isHidden := map[string]bool{}
	for _, id := range hidden {
		isHidden[id] = true
	}
	for id, m := range raw {
		if isHidden[id] {
			continue
		}
		if m.Base != "" {
			b := raw[m.Base]
			if b == nil || b.Base != "" {
				_ = os.Remove(st.manifestPath(id)) // its base is gone: not restorable
				continue
			}
			m = applyDelta(m, b)
		}
		for _, e := range m.Files {
			if e.Link == "" {
				st.refs[e.Hash]++
			}
		}
		st.list = append(st.list, snapRef{id: id, seq: m.Seq, bytes: sizes[id], base: m.Base})
		st.bytes += sizes[id]
		st.seq = max(st.seq, m.Seq)
		if id == headID || (!st.headFile && (st.head == nil || m.Seq > st.head.Seq)) {
			st.head = m
		}
		if m.Base == "" && (st.base == nil || m.Seq > st.base.Seq) {
			st.base = m
		}
	}
	for _, id := range hidden {
		if st.dependents(id) == 0 {
			_ = os.Remove(st.basePath(id))
			continue
		}
		st.hidden[id] = sizes[id]
		st.bytes += sizes[id]
		if st.base == nil || raw[id].Seq > st.base.Seq {
			st.base = raw[id]
		}
	}
	sort.Slice(st.list, func(i, j int) bool { return st.list[i].seq < st.list[j].seq })
	err = filepath.WalkDir(filepath.Join(st.dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		h := d.Name()
		if st.refs[h] == 0 {
			_ = os.Remove(p)
			return nil
		}
		if fi, err := d.Info(); err == nil {
			st.blobSize[h] = fi.Size()
			st.bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sandbox: snapshots: %w", err)
	}
	st.loaded = true
	return nil
}

// basePath is where a whole manifest pruned as a snapshot stays while
// deltas of snapshots still kept need it.
func (st *snapStore) basePath(id string) string {
	return filepath.Join(st.dir, "manifests", id+".base")
}

// dependents counts the snapshots kept that are deltas of id.
func (st *snapStore) dependents(id string) int {
	n := 0
	for _, r := range st.list {
		if r.base == id {
			n++
		}
	}
	return n
}

// readManifest reads the snapshot id (or the base id), resolved whole.
func (st *snapStore) readManifest(id string) (*manifest, error) {
	if m := st.head; m != nil && m.ID == id {
		return m, nil
	}
	if m := st.base; m != nil && m.ID == id {
		return m, nil
	}
	for _, m := range st.cache {
		if m.ID == id {
			return m, nil
		}
	}
	data, err := os.ReadFile(st.manifestPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		data, err = os.ReadFile(st.basePath(id))
	}
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(data)
	if err != nil {
		return nil, err
	}
	if m.ID != id {
		return nil, fmt.Errorf("manifest %s names %s", id, m.ID)
	}
	if m.Base != "" {
		b, err := st.readManifest(m.Base)
		if err != nil {
			return nil, fmt.Errorf("the base of %s: %w", id, err)
		}
		if b.Base != "" {
			return nil, fmt.Errorf("the base of %s is a delta", id)
		}
		m = applyDelta(m, b)
	} else {
		// A whole one is read again for the deltas of the snapshots
		// after it (pruning walks them in order): keep the last.
		st.cache = []*manifest{m}
	}
	return m, nil
}

// writeAtomic writes a file of the store through a temporary file and a
// rename, so a crash leaves the old file or the new one.
func writeAtomic(p string, write func(io.Writer) error) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return 0, err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return 0, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, err
	}
	return fi.Size(), nil
}

// writeBlob writes a blob under its final name: a blob is named by its
// content and held only once a manifest naming it is saved, so one a crash
// cut short is held by none and deleted by the next load.
func writeBlob(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
			f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(p)
	}
	return err
}

func (st *snapStore) ref(h string) { st.refs[h]++ }

// unref drops one reference to a blob, deleting it with the last.
func (st *snapStore) unref(h string) {
	st.refs[h]--
	if st.refs[h] > 0 {
		return
	}
	delete(st.refs, h)
	_ = os.Remove(st.blobPath(h))
	st.bytes -= st.blobSize[h]
	delete(st.blobSize, h)
}

// pruneOldest deletes the oldest snapshot and the blobs only it held. A
// whole manifest that deltas of kept snapshots stand on stays, as a base,
// until the last of them goes.
func (st *snapStore) pruneOldest() {
	ref := st.list[0]
	st.list = st.list[1:]
	m, err := st.readManifest(ref.id)
	switch {
	case ref.base == "" && st.dependents(ref.id) > 0:
		if os.Rename(st.manifestPath(ref.id), st.basePath(ref.id)) == nil {
			st.hidden[ref.id] = ref.bytes
		} else {
			st.bytes -= ref.bytes
		}
	default:
		_ = os.Remove(st.manifestPath(ref.id))
		st.bytes -= ref.bytes
		if st.base != nil && st.base.ID == ref.id {
			st.base = nil
		}
	}
	if ref.base != "" {
		if size, ok := st.hidden[ref.base]; ok && st.dependents(ref.base) == 0 {
			_ = os.Remove(st.basePath(ref.base))
			st.bytes -= size
			delete(st.hidden, ref.base)
			if st.base != nil && st.base.ID == ref.base {
				st.base = nil
			}
		}
	}
	if err != nil {
		return // its blobs stay until the next load finds them unheld
	}
	for _, e := range m.Files {
		if e.Link == "" {
			st.unref(e.Hash)
		}
	}
}

func (st *snapStore) has(id string) bool {
	return slices.ContainsFunc(st.list, func(r snapRef) bool { return r.id == id })
}

// room makes room for need more bytes within limit (0: none), pruning the
// oldest snapshots; false when even that is not enough.
func (st *snapStore) room(need, limit int64) bool {
	if limit <= 0 {
		return true
	}
	for st.bytes+need > limit && len(st.list) > 0 {
		st.pruneOldest()
	}
	return st.bytes+need <= limit
}

// snapshotMemoryEntries bounds what the Manager keeps in memory of the
// stores it loaded (the head manifest's entries and the blob counts: some
// 200 bytes each); past it the stores used least recently are unloaded and
// read again from disk when next used.
const snapshotMemoryEntries = 500_000

// storeLRU tracks the loaded snapshot stores of a Manager.
type storeLRU struct {
	mu     sync.Mutex // guards the following
	budget int
	total  int
	order  *list.List // of *snapStore, most recently used first
	elems  map[*snapStore]*list.Element
	weight map[*snapStore]int
}

func newStoreLRU(budget int) *storeLRU {
	return &storeLRU{budget: budget, order: list.New(), elems: map[*snapStore]*list.Element{}, weight: map[*snapStore]int{}}
}

// used records that st was just used, with weight w (0: not loaded), and
// unloads the least recently used others while the total is over budget.
// It is called with st.mu released; a store busy meanwhile (its lock
// taken) is left loaded and counted again when its user is done.
func (l *storeLRU) used(st *snapStore, w int) {
	var victims []*snapStore
	l.mu.Lock()
	l.drop(st)
	if w > 0 {
		l.elems[st] = l.order.PushFront(st)
		l.weight[st] = w
		l.total += w
	}
	for l.total > l.budget && l.order.Len() > 1 {
		v := l.order.Back().Value.(*snapStore)
		l.drop(v)
		victims = append(victims, v)
	}
	l.mu.Unlock()
	for _, v := range victims {
		if v.mu.TryLock() {
			v.unload()
			v.mu.Unlock()
		}
	}
}

func (l *storeLRU) forget(st *snapStore) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop(st)
}

func (l *storeLRU) drop(st *snapStore) {
	if e := l.elems[st]; e != nil {
		l.order.Remove(e)
		delete(l.elems, st)
		l.total -= l.weight[st]
		delete(l.weight, st)
	}
}

// weight is what st holds in memory (st.mu held).
func (st *snapStore) weight() int {
	if !st.loaded {
		return 0
	}
	n := len(st.refs)
	for _, m := range append([]*manifest{st.head, st.base}, st.cache...) {
		if m != nil {
			n += len(m.Files)
		}
	}
	return n
}

// unload forgets what load read (st.mu held); the next use reads it again.
func (st *snapStore) unload() {
	st.loaded = false
	st.list, st.refs, st.blobSize, st.head = nil, nil, nil, nil
	st.base, st.hidden, st.cache = nil, nil, nil
	st.bytes = 0
}

// lockSnapshots takes the store's lock; the func it returns releases it
// and records the use (storeLRU).
func (s *Sandbox) lockSnapshots() (st *snapStore, unlock func()) {
	st = s.snaps
	st.mu.Lock()
	return st, func() {
		w := st.weight()
		st.mu.Unlock()
		s.m.stores.used(st, w)
	}
}

// TrackSnapshot is Track whose changes func also keeps a restorable
// snapshot when the step changed files (forge.SnapshotSandbox). A snapshot
// that cannot be kept is logged and returned nil: it never fails the step.
func (s *Sandbox) TrackSnapshot(ctx context.Context) (func(context.Context, func() string) (Patch, *forge.WorkspaceSnapshot, error), error) {
	before, err := s.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, newID func() string) (Patch, *forge.WorkspaceSnapshot, error) {
		patch, after, err := s.Diff(ctx, before)
		if err != nil || patch.Empty() {
			return patch, nil, err
		}
		ws, err := s.keep(ctx, newID(), after)
		if err != nil {
			if ctx.Err() == nil {
				s.m.log.Warn("sandbox: workspace snapshot not kept", "session_id", s.id, "err", err)
			}
			return patch, nil, nil
		}
		return patch, ws, nil
	}, nil
}

var _ forge.SnapshotSandbox = (*Sandbox)(nil)

// LatestSnapshot is the snapshot the files were last saved as or restored
// to, nil when there is none (or it was pruned).
func (s *Sandbox) LatestSnapshot() *forge.WorkspaceSnapshot {
	if s.snaps == nil {
		return nil
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil || st.head == nil || !st.has(st.head.ID) {
		return nil
	}
	return &forge.WorkspaceSnapshot{ID: st.head.ID, Files: len(st.head.Files), Partial: st.head.Partial}
}

// Snapshots lists the session's workspace snapshots, oldest first.
func (s *Sandbox) Snapshots() ([]string, error) {
	if s.snaps == nil {
		return nil, nil
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil {
		return nil, err
	}
	ids := make([]string, len(st.list))
	for i, r := range st.list {
		ids[i] = r.id
	}
	return ids, nil
}

// keep saves a snapshot named id of the files as after (the step's walk)
// found them.
func (s *Sandbox) keep(ctx context.Context, id string, after *Snapshot) (*forge.WorkspaceSnapshot, error) {
	if s.snaps == nil {
		return nil, errors.New("sandbox: no snapshot store")
	}
	if !snapshotIDPattern.MatchString(id) {
		return nil, fmt.Errorf("sandbox: invalid snapshot id %q", id)
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil {
		return nil, err
	}
	if st.has(id) {
		return nil, fmt.Errorf("sandbox: snapshot %s exists", id)
	}
	opts := s.m.opts
	m := &manifest{ID: id, Seq: st.seq + 1, Files: make(map[string]*entry, len(after.files)),
		Dirs: make(map[string]uint32, len(after.dirs)), Truncated: after.partial}
	for p, mode := range after.dirs {
		m.Dirs[p] = uint32(mode)
	}
	var prev map[string]*entry
	if st.head != nil {
		prev = st.head.Files
	}
	// held are the references taken for m: they keep its blobs from being
	// pruned to make room, and are dropped again if m is not saved.
	var held []string
	saved := false
	defer func() {
		if !saved {
			for _, h := range held {
				st.unref(h)
			}
		}
	}()
	take := func(p string, e *entry) {
		st.ref(e.Hash)
		held = append(held, e.Hash)
		m.Files[p] = e
	}
	paths := make([]string, 0, len(after.files))
	for p := range after.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var read int64
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := after.files[p]
		if f.mode&fs.ModeSymlink != 0 {
			m.Files[p] = &entry{Link: f.target}
			continue
		}
		meta := metaKey(f.meta)
		if e := prev[p]; e != nil && e.Link == "" && e.Size == f.size && e.Mode == uint32(f.mode) && e.Meta == meta && st.refs[e.Hash] > 0 {
			take(p, e)
			continue
		}
		if f.hashed {
			if h := hex.EncodeToString(f.hash[:]); st.refs[h] > 0 {
				take(p, &entry{Hash: h, Size: f.size, Mode: uint32(f.mode), Meta: meta})
				continue
			}
		}
		if f.size > opts.LineCountMaxSize || (opts.SnapshotHashBytes > 0 && read+f.size > opts.SnapshotHashBytes) {
			m.Skipped = append(m.Skipped, p)
			continue
		}
		e, n, err := s.storeFile(p)
		read += n
		if err != nil {
			m.Skipped = append(m.Skipped, p)
			continue
		}
		take(p, e)
	}
	m.Partial = m.Truncated || len(m.Skipped) > 0
	// A delta of the base while it differs little: an unchanged file
	// costs the manifest nothing either.
	var data []byte
	delta := false
	if st.base != nil {
		data, delta = encodeDelta(m, st.base)
	}
	if delta {
		m.Base = st.base.ID
	} else {
		data = encodeManifest(m)
	}
	size, err := writeAtomic(st.manifestPath(id), func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: snapshot manifest: %w", err)
	}
	saved = true
	st.seq = m.Seq
	st.list = append(st.list, snapRef{id: id, seq: m.Seq, bytes: size, base: m.Base})
	st.bytes += size
	st.head = m
	if !delta {
		st.base = m
	}
	if st.headFile {
		if err := os.Remove(filepath.Join(st.dir, "HEAD")); err == nil || errors.Is(err, fs.ErrNotExist) {
			st.headFile = false
		}
	}
	for opts.MaxSnapshots > 0 && len(st.list) > opts.MaxSnapshots {
		st.pruneOldest()
	}
	// The manifest itself may take the store over its room.
	for opts.WorkspaceQuota > 0 && st.bytes > opts.WorkspaceQuota && len(st.list) > 1 {
		st.pruneOldest()
	}
	return &forge.WorkspaceSnapshot{ID: id, Files: len(m.Files), Partial: m.Partial}, nil
}

func (st *snapStore) writeHead(id string) error {
	_, err := writeAtomic(filepath.Join(st.dir, "HEAD"), func(w io.Writer) error {
		_, err := io.WriteString(w, id+"\n")
		return err
	})
	return err
}

// storeFile reads a file of the work directory (refusing symlinks on the
// way, as the file tools do) and keeps its content as a blob unless one
// holds it already. n is how much it read.
func (s *Sandbox) storeFile(rel string) (e *entry, n int64, err error) {
	st := s.snaps
	limit := s.m.opts.LineCountMaxSize
	f, err := s.openInside(filepath.Join(s.dir, filepath.FromSlash(rel)), os.O_RDONLY, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, int64(len(data)), err
	}
	n = int64(len(data))
	if n > limit {
		return nil, n, errors.New("grew past the size kept")
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, n, err
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	e = &entry{Hash: h, Size: n, Mode: uint32(fi.Mode().Perm()), Meta: metaKey(metaOf(fi))}
	if st.refs[h] > 0 {
		return e, n, nil
	}
	if !st.room(n, s.m.opts.WorkspaceQuota) {
		return nil, n, errors.New("no room left in the snapshot store")
	}
	if err := writeBlob(st.blobPath(h), data); err != nil {
		return nil, n, err
	}
	st.blobSize[h] = n
	st.bytes += n
	return e, n, nil
}

// workState is the work directory as a restore finds it (metadata only).
type workState struct {
	files map[string]fs.FileInfo // everything but directories
	dirs  map[string]bool
	// truncated: the walk stopped before seeing everything.
	truncated bool
}

func (s *Sandbox) walkState(ctx context.Context) (*workState, error) {
	ws := &workState{files: map[string]fs.FileInfo{}, dirs: map[string]bool{}}
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err != nil {
			if p == s.dir {
				return err
			}
			return nil
		}
		if p == s.dir {
			return nil
		}
		if len(ws.files)+len(ws.dirs) >= 2*MaxSnapshotFiles {
			ws.truncated = true
			return filepath.SkipAll
		}
		rel := s.rel(p)
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			ws.dirs[rel] = true
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		ws.files[rel] = fi
		return nil
	})
	return ws, err
}

// Restore brings the work directory back to the snapshot id: files and
// directories made since are removed (unless the snapshot is truncated),
// changed and deleted ones written again, symlinks recreated. Files the
// snapshot skipped, and .git directories, are left as they are. Every
// change goes through an os.Root on the work directory and replaces
// entries rather than writing through them (a new file renamed over the
// old name), so a symlink or hard link found in the workspace is never
// followed out of it.
func (s *Sandbox) Restore(ctx context.Context, id string) (forge.WorkspaceRestore, error) {
	res := forge.WorkspaceRestore{Snapshot: id}
	if !snapshotIDPattern.MatchString(id) {
		return res, forge.Errorf(forge.ErrInvalid, "snapshot %q is not a snapshot id (snap_...)", id)
	}
	if s.snaps == nil {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", id)
	}
	st, unlock := s.lockSnapshots()
	defer unlock()
	if err := st.load(); err != nil {
		return res, err
	}
	if !st.has(id) {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", id)
	}
	m, err := st.readManifest(id)
	if err != nil {
		return res, fmt.Errorf("sandbox: snapshot %s: %w", id, err)
	}
	res.Partial = m.Partial
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return res, fmt.Errorf("sandbox: restore: %w", err)
	}
	defer root.Close()
	cur, err := s.walkState(ctx)
	if err != nil {
		return res, fmt.Errorf("sandbox: restore: %w", err)
	}
	if cur.truncated {
		res.Partial = true // files past the walk's bound stay
	}
	var failed []error
	fail := func(p string, err error) {
		failed = append(failed, fmt.Errorf("%s: %w", p, err))
	}
	skipped := map[string]bool{}
	for _, p := range m.Skipped {
		skipped[p] = true
	}
	// What came since goes: files first, then directories (the topmost of
	// each tree that the snapshot lacks).
	if !m.Truncated {
		for p, fi := range cur.files {
			if e := m.Files[p]; (e != nil && (e.Link != "") == (fi.Mode()&fs.ModeSymlink != 0)) || skipped[p] {
				continue
			}
			if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fail(p, err)
				continue
			}
			delete(cur.files, p)
			res.Removed++
		}
		var extra []string
		for p := range cur.dirs {
			if _, ok := m.Dirs[p]; !ok {
				extra = append(extra, p)
			}
		}
		sort.Strings(extra)
		for _, p := range extra {
			if parent := path.Dir(p); parent != "." {
				if _, ok := m.Dirs[parent]; !ok {
					continue // inside an extra directory removed whole
				}
			}
			if err := root.RemoveAll(p); err != nil {
				fail(p, err)
				continue
			}
			res.Removed++
		}
	}
	dirs := make([]string, 0, len(m.Dirs))
	for p := range m.Dirs {
		dirs = append(dirs, p)
	}
	sort.Strings(dirs) // parents first
	for _, p := range dirs {
		if err := s.restoreDir(root, p); err != nil {
			fail(p, err)
		}
	}
	paths := make([]string, 0, len(m.Files))
	for p := range m.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	head := &manifest{ID: m.ID, Seq: m.Seq, Files: make(map[string]*entry, len(m.Files)), Dirs: m.Dirs,
		Skipped: m.Skipped, Truncated: m.Truncated, Partial: m.Partial}
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		e := m.Files[p]
		head.Files[p] = e
		written, err := s.restoreFile(root, p, e, cur.files[p])
		if err != nil {
			fail(p, err)
			continue
		}
		if written != nil {
			head.Files[p] = written
			res.Written++
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children first
		if err := restoreDirMode(root, dirs[i], fs.FileMode(m.Dirs[dirs[i]])); err != nil {
			fail(dirs[i], err)
		}
	}
	// The quota is measured again before the next write.
	s.mu.Lock()
	s.usage = -1
	s.mu.Unlock()
	st.head = head
	if err := st.writeHead(id); err != nil {
		s.m.log.Warn("sandbox: snapshot head not written", "session_id", s.id, "err", err)
	} else {
		st.headFile = true
	}
	if len(failed) > 0 {
		res.Partial = true
		s.m.log.Warn("sandbox: restore left files as they were", "session_id", s.id, "snapshot", id,
			"failed", len(failed), "err", errors.Join(failed[:min(len(failed), 5)]...))
	}
	return res, nil
}

// restoreDir makes p a directory, replacing whatever else is there (a
// symlink is removed, not followed). Its mode is set after the files are
// written (restoreDirModes): a read-only directory still takes them.
func (s *Sandbox) restoreDir(root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		if err := root.Remove(p); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := root.Mkdir(p, 0o700); err != nil {
		return err
	}
	if s.uid >= 0 {
		return root.Lchown(p, s.uid, s.gid)
	}
	return nil
}

// restoreDirMode sets a directory's permissions back (p was made a
// directory by restoreDir).
func restoreDirMode(root *os.Root, p string, perm fs.FileMode) error {
	fi, err := root.Lstat(p)
	if err != nil || !fi.IsDir() {
		return err
	}
	if fi.Mode().Perm() == perm {
		return nil
	}
	return root.Chmod(p, perm)
}

// restoreFile makes p the file or symlink e, unless cur (what the walk
// found there) already is. It returns the entry as written (with the new
// file's metadata), nil when nothing needed writing.
func (s *Sandbox) restoreFile(root *os.Root, p string, e *entry, cur fs.FileInfo) (*entry, error) {
	if e.Link != "" {
		if cur != nil && cur.Mode()&fs.ModeSymlink != 0 {
			if t, err := root.Readlink(p); err == nil && t == e.Link {
				return nil, nil
			}
		}
		if err := s.clear(root, p); err != nil {
			return nil, err
		}
		if err := root.Symlink(e.Link, p); err != nil {
			return nil, err
		}
		if s.uid >= 0 {
			if err := root.Lchown(p, s.uid, s.gid); err != nil {
				return nil, err
			}
		}
		return e, nil
	}
	if cur != nil && cur.Mode().IsRegular() && cur.Size() == e.Size && uint32(cur.Mode().Perm()) == e.Mode {
		if metaKey(metaOf(cur)) == e.Meta || s.sameContent(root, p, e.Hash) {
			return nil, nil
		}
	}
	blob, err := os.Open(s.snaps.blobPath(e.Hash))
	if err != nil {
		return nil, err
	}
	defer blob.Close()
	tmp := path.Join(path.Dir(p), ".forge-restore-"+rand.Text())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), blob)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != e.Hash {
		err = errors.New("the kept content is damaged")
	}
	if err == nil {
		err = f.Chmod(fs.FileMode(e.Mode))
	}
	if err == nil && s.uid >= 0 {
		err = f.Chown(s.uid, s.gid)
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && cur != nil && cur.IsDir() {
		err = root.RemoveAll(p)
	}
	if err == nil {
		// Rename replaces the name: a symlink or hard link there is
		// dropped, never written through.
		err = root.Rename(tmp, p)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return nil, err
	}
	// The rename keeps the inode; only the ctime may move: read it again.
	if after, err := root.Lstat(p); err == nil {
		fi = after
	}
	return &entry{Hash: e.Hash, Size: e.Size, Mode: e.Mode, Meta: metaKey(metaOf(fi))}, nil
}

// clear removes whatever is at p (a directory with its contents).
func (s *Sandbox) clear(root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return root.RemoveAll(p)
	default:
		return root.Remove(p)
	}
}

// sameContent reports whether the regular file p holds the content of
// hash (read through the root, without following a final symlink).
func (s *Sandbox) sameContent(root *os.Root, p, want string) bool {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var h hash.Hash = sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, s.m.opts.LineCountMaxSize+1)); err != nil {
		return false
	}
	return hex.EncodeToString(h.Sum(nil)) == want
}

// ListSnapshots lists the workspace snapshots the session's sandbox keeps,
// oldest first, without provisioning a sandbox (none: an empty list).
func (m *Manager) ListSnapshots(_ context.Context, sessionID string) ([]forge.WorkspaceSnapshotInfo, error) {
	out := []forge.WorkspaceSnapshotInfo{}
	if !validID.MatchString(sessionID) {
		return out, nil
	}
	entries, err := os.ReadDir(filepath.Join(m.root, sessionID, "snapshots", "manifests"))
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: list snapshots: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !snapshotIDPattern.MatchString(e.Name()) {
			continue // a pruned base kept for its deltas, a temporary file
		}
		fi, err := e.Info()
		if err != nil {
			continue // pruned meanwhile
		}
		out = append(out, forge.WorkspaceSnapshotInfo{ID: e.Name(), CreatedAt: fi.ModTime().UTC()})
	}
	slices.SortFunc(out, func(a, b forge.WorkspaceSnapshotInfo) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// RestoreSnapshot restores the session's work directory to a workspace
// snapshot (Sandbox.Restore). A session without a sandbox has no
// snapshots: none is provisioned for the asking.
func (m *Manager) RestoreSnapshot(ctx context.Context, sessionID, snapshotID string) (forge.WorkspaceRestore, error) {
	res := forge.WorkspaceRestore{Snapshot: snapshotID}
	if !snapshotIDPattern.MatchString(snapshotID) {
		return res, forge.Errorf(forge.ErrInvalid, "snapshot %q is not a snapshot id (snap_...)", snapshotID)
	}
	if !validID.MatchString(sessionID) {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", snapshotID)
	}
	if _, err := os.Lstat(filepath.Join(m.root, sessionID, "snapshots", "manifests", snapshotID)); err != nil {
		return res, forge.Errorf(forge.ErrSnapshotNotFound, "this session has no workspace snapshot %s", snapshotID)
	}
	sb, _, err := m.Get(ctx, sessionID)
	if err != nil {
		return res, err
	}
	return sb.Restore(ctx, snapshotID)
}
