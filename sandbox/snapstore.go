package sandbox

// The snapshot store of one sandbox: blobs named by their content,
// manifests, the head, and the reference counts that say which blobs a
// prune may remove; and the LRU that bounds how many stores a Manager
// keeps loaded.

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
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

func (st *snapStore) writeHead(id string) error {
	_, err := writeAtomic(filepath.Join(st.dir, "HEAD"), func(w io.Writer) error {
		_, err := io.WriteString(w, id+"\n")
		return err
	})
	return err
}
