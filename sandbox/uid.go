package sandbox

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// uidPool hands each sandbox a host uid (and the gid of the same number)
// of its own from [base, base+count), when the server runs as root. A
// sandbox's uid is the owner of its work directory, so it survives a
// restart; the pool learns the uids in use from the sandboxes on disk.
type uidPool struct {
	base, count uint32

	// guarded by Manager.mu
	used map[uint32]string // uid -> session id
	next uint32            // where the search for a free uid starts
	full bool              // logged once: sandboxes now share uids
}

func newUIDPool(base, count uint32) *uidPool {
	return &uidPool{base: base, count: count, used: map[uint32]string{}}
}

func (p *uidPool) contains(uid uint32) bool {
	return uid >= p.base && uid-p.base < p.count
}

// load records the uids of the sandboxes found under root.
func (p *uidPool) load(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !validID.MatchString(e.Name()) {
			continue
		}
		if uid, ok := ownerOf(filepath.Join(root, e.Name(), "work")); ok && p.contains(uid) {
			if _, taken := p.used[uid]; !taken {
				p.used[uid] = e.Name()
			}
		}
	}
}

// assign returns the uid of session id: the owner of its work directory
// when that is a uid of the pool not taken by another session, else a
// free one (or, with every uid taken, one shared by hashing: the pool is
// then logged as full). reassigned says the directory must be chowned.
func (p *uidPool) assign(id, work string) (uid uint32, reassigned, shared bool) {
	if owner, ok := ownerOf(work); ok && p.contains(owner) {
		if s, taken := p.used[owner]; !taken || s == id {
			p.used[owner] = id
			return owner, false, false
		}
	}
	for i := uint32(0); i < p.count; i++ {
		c := p.base + (p.next+i)%p.count
		if _, taken := p.used[c]; !taken {
			p.used[c] = id
			p.next = (c - p.base + 1) % p.count
			return c, true, false
		}
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return p.base + h.Sum32()%p.count, true, true
}

// release forgets the uid of a removed sandbox.
func (p *uidPool) release(id string, uid uint32) {
	if p.used[uid] == id {
		delete(p.used, uid)
	}
}

func ownerOf(path string) (uint32, bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// chownTree gives dir and everything below it to uid:gid, without
// following symlinks (they are chowned themselves).
func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := os.Lchown(p, uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

// writeIdentity writes the passwd and group files a sandbox's programs see
// (bound read-only over /etc/passwd and /etc/group): root, the sandbox's
// user and nobody. Tools such as git and ssh need the current user to have
// a name and a home.
func writeIdentity(base string, uid, gid int) error {
	etc := filepath.Join(base, "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	home := filepath.Join(base, "home")
	passwd := "root:x:0:0:root:/root:/usr/sbin/nologin\n"
	group := "root:x:0:\n"
	if uid != 0 {
		passwd += fmt.Sprintf("sandbox:x:%d:%d:Forge sandbox:%s:/bin/bash\n", uid, gid, home)
	}
	if gid != 0 {
		group += fmt.Sprintf("sandbox:x:%d:\n", gid)
	}
	passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group += "nogroup:x:65534:\n"
	for name, content := range map[string]string{"passwd": passwd, "group": group} {
		if err := writeFileAtomic(filepath.Join(etc, name), content); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path, content string) error {
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
