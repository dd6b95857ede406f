//go:build linux

package launcher

import (
	"runtime"
	"syscall"
	"unsafe"
)

func init() {
	argv := cmdline()
	if len(argv) == 0 || argv[0] != Arg0 {
		return
	}
	// Namespaces and credentials are per thread until the exec.
	runtime.LockOSThread()
	msg := launch(argv[1:])
	fail(msg)
}

func fail(msg string) {
	b := []byte("sandbox: cannot start the command: " + msg + "\n")
	syscall.Write(2, b)
	syscall.Exit(Failed)
}

// cmdline reads argv from /proc/self/cmdline (package os, which holds
// os.Args, is not initialized yet); nil unless argv[0] is Arg0.
func cmdline() []string {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var data []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(fd, buf)
		if n > 0 {
			data = append(data, buf[:n]...)
		}
		if !hasPrefix(data, Arg0+"\x00") && len(data) > len(Arg0) {
			return nil // not a launch: the common case, decided on the first read
		}
		if n <= 0 || err != nil {
			break
		}
	}
	if !hasPrefix(data, Arg0+"\x00") {
		return nil
	}
	var out []string
	for len(data) > 0 {
		i := 0
		for i < len(data) && data[i] != 0 {
			i++
		}
		out = append(out, string(data[:i]))
		if i == len(data) {
			break
		}
		data = data[i+1:]
	}
	return out
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

type rlimit struct {
	resource int
	cur, max uint64
}

type staged struct {
	name, path string
	ro         bool
}

// launch does what the directives say and executes the program; it
// returns only the reason it could not.
func launch(args []string) string {
	var (
		limits     []rlimit
		stage      []staged
		switchUser bool
		uid, gid   uint64
	)
	i := 0
	for ; i < len(args) && args[i] != "--"; i++ {
		key, val := cut(args[i], '=')
		switch key {
		case "rlimit":
			r, rest := cut(val, ':')
			c, m := cut(rest, ':')
			res, ok1 := atou(r)
			cur, ok2 := atou(c)
			max, ok3 := atou(m)
			if !ok1 || !ok2 || !ok3 {
				return "bad directive " + args[i]
			}
			limits = append(limits, rlimit{int(res), cur, max})
		case "stage":
			mode, rest := cut(val, ':')
			name, path := cut(rest, ':')
			if (mode != "ro" && mode != "rw") || name == "" || path == "" || path[0] != '/' {
				return "bad directive " + args[i]
			}
			stage = append(stage, staged{name: name, path: path, ro: mode == "ro"})
		case "user":
			u, g := cut(val, ':')
			var ok1, ok2 bool
			uid, ok1 = atou(u)
			gid, ok2 = atou(g)
			if !ok1 || !ok2 {
				return "bad directive " + args[i]
			}
			switchUser = true
		default:
			return "bad directive " + args[i]
		}
	}
	if i+1 >= len(args) || args[i+1] == "" || args[i+1][0] != '/' {
		return "no absolute program path after --"
	}
	prog := args[i+1:]
	if len(stage) > 0 {
		if msg := stagePaths(stage); msg != "" {
			return "stage the sandbox directories: " + msg
		}
	}
	// Everything execve needs is allocated now: once the memory limit is
	// set, this process (maybe larger than it already) allocates no more.
	path, err := syscall.BytePtrFromString(prog[0])
	if err != nil {
		return err.Error()
	}
	argv, err := syscall.SlicePtrFromStrings(prog)
	if err != nil {
		return err.Error()
	}
	envv, err := syscall.SlicePtrFromStrings(syscall.Environ())
	if err != nil {
		return err.Error()
	}
	for _, l := range limits {
		lim := [2]uint64{l.cur, l.max}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, 0, uintptr(l.resource), uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
			return "set resource limit " + utoa(uint64(l.resource)) + ": " + e.Error()
		}
	}
	if switchUser {
		// Raw syscalls act on this thread only: the one that executes the
		// program (the others end with the exec).
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return "setgroups: " + e.Error()
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return "setresgid " + utoa(gid) + ": " + e.Error()
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			return "setresuid " + utoa(uid) + ": " + e.Error()
		}
	}
	// No setuid binary or file capability grants anything from here on.
	const prSetNoNewPrivs = 38
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return "no_new_privs: " + e.Error()
	}
	_, _, e := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	return "exec " + prog[0] + ": " + e.Error()
}

// stagePaths binds each path under StageDir in a private mount namespace
// of this thread (and so of the program it executes). The paths are opened
// in that namespace (a bind's source must be in it) before the tmpfs
// covers StageDir.
func stagePaths(paths []staged) string {
	if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
		return "unshare the mount namespace: " + err.Error()
	}
	// Nothing mounted here propagates back to the host.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return "make mounts private: " + err.Error()
	}
	const oPath = 0x200000
	fds := make([]int, len(paths))
	for i, p := range paths {
		fd, err := syscall.Open(p.path, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return "open " + p.path + ": " + err.Error()
		}
		defer syscall.Close(fd)
		fds[i] = fd
	}
	if err := syscall.Mount("forge-stage", StageDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return "mount the staging tmpfs on " + StageDir + ": " + err.Error()
	}
	for i, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Fstat(fds[i], &st); err != nil {
			return "stat " + p.path + ": " + err.Error()
		}
		dst := Staged(p.name)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			if err := syscall.Mkdir(dst, 0o755); err != nil {
				return "mkdir " + dst + ": " + err.Error()
			}
		case syscall.S_IFREG:
			fd, err := syscall.Open(dst, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY|syscall.O_CLOEXEC, 0o644)
			if err != nil {
				return "create " + dst + ": " + err.Error()
			}
			syscall.Close(fd)
		default:
			return p.path + " is neither a directory nor a regular file"
		}
		src := "/proc/self/fd/" + utoa(uint64(fds[i]))
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
			return "bind " + p.path + ": " + err.Error()
		}
		if p.ro {
			if err := syscall.Mount("", dst, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV, ""); err != nil {
				return "bind " + p.path + " read-only: " + err.Error()
			}
		}
	}
	return ""
}

func cut(s string, sep byte) (string, string) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

func atou(s string) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		d := uint64(s[i] - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func utoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}
