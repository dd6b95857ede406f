package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// explain names the limit a finished command hit, when its outcome shows
// one. Limits set with setrlimit do not report themselves: a process over
// its CPU time or file size gets a signal (SIGXCPU, SIGXFSZ; bubblewrap
// exits with 128 plus the signal, bash prints its name), and an allocation
// over the memory limit, a fork past the process limit or a write to a
// full /tmp fails with an error the program prints. The messages below are
// the ones programs print for these errors (libc's strerror, bash, Python,
// Perl, Node, Go).
func (s *Sandbox) explain(res *RunResult, ps *os.ProcessState, cpu time.Duration) {
	o := s.m.opts
	if res.QuotaKilled {
		res.Limit = LimitQuota
		res.LimitMessage = fmt.Sprintf("killed: workspace quota %s exceeded (work/ and home/ use %s); delete files to go on",
			FormatBytes(o.WorkspaceQuota), FormatBytes(res.WorkspaceBytes))
		return
	}
	if res.TimedOut || res.Stopped || res.Canceled || res.ExitCode == 0 {
		return
	}
	sig := syscall.Signal(0)
	if ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig = ws.Signal()
		}
	}
	if res.ExitCode > 128 && res.ExitCode < 128+65 {
		sig = syscall.Signal(res.ExitCode - 128)
	}
	out := res.Output
	has := func(markers ...string) bool {
		for _, m := range markers {
			if strings.Contains(out, m) {
				return true
			}
		}
		return false
	}
	switch {
	case cpu > 0 && (sig == syscall.SIGXCPU || has("CPU time limit exceeded")):
		res.Limit = LimitCPU
		res.LimitMessage = fmt.Sprintf("killed: CPU time limit %s exceeded (per process)", cpu.Round(time.Second))
	case sig == syscall.SIGXFSZ || has("File size limit exceeded", "File too large", "Errno 27"):
		res.Limit = LimitFileSize
		if res.WritesDisabled {
			res.LimitMessage = fmt.Sprintf("file writes are disabled: the workspace is over its quota of %s; delete files (rm) to go on",
				FormatBytes(o.WorkspaceQuota))
		} else {
			res.LimitMessage = fmt.Sprintf("file size limit %s exceeded: no file may grow beyond it", FormatBytes(o.MaxFileSize))
		}
	case o.MemoryLimit > 0 && has("Cannot allocate memory", "cannot allocate memory", "MemoryError", "Out of memory",
		"out of memory", "bad_alloc", "memory exhausted", "Memory exhausted", "memory allocation", "Allocation failed"):
		res.Limit = LimitMemory
		res.LimitMessage = fmt.Sprintf("memory limit %s exceeded: an allocation failed (each process may use at most %s)",
			FormatBytes(o.MemoryLimit), FormatBytes(o.MemoryLimit))
	case o.MaxProcs > 0 && s.uid >= 0 && has("Resource temporarily unavailable", "fork: retry", "Cannot fork", "can't fork",
		"can't start new thread", "failed to create new OS thread", "pthread_create"):
		res.Limit = LimitProcesses
		res.LimitMessage = fmt.Sprintf("too many processes: the sandbox runs at most %d processes and threads at once", o.MaxProcs)
	case has("No space left on device"):
		if res.OverQuota {
			res.Limit = LimitQuota
			res.LimitMessage = fmt.Sprintf("workspace quota %s exceeded", FormatBytes(o.WorkspaceQuota))
		} else if o.TmpSize > 0 && s.m.bwrap != "" {
			res.Limit = LimitTmp
			res.LimitMessage = fmt.Sprintf("no space left: /tmp holds at most %s and /dev/shm %s (they are in memory); "+
				"write large files in the working directory", FormatBytes(o.TmpSize), FormatBytes(min(o.TmpSize, shmMax)))
		}
	}
}

// FormatBytes writes n in binary units (1 GiB, 256 MiB, 1.5 KiB, 12 B), as
// ParseBytes reads them; "no limit" for 0 or less.
func FormatBytes(n int64) string {
	if n <= 0 {
		return "no limit"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	u := 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if u == 0 {
		return strconv.FormatInt(n, 10) + " B"
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + units[u]
}

// ParseBytes reads a size: a number of bytes, or one with a unit (K, M, G,
// T, binary: 1024; KiB, MiB, ... alike; KB, MB, ... decimal), e.g. 1G,
// 512MiB, 2GB. "0" and "off" (or any negative number) turn a limit off:
// they return -1.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "off" || t == "none" || t == "unlimited" {
		return -1, nil
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '-') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("bad size %q: want a number of bytes with an optional unit (K, M, G, T; KiB, MiB, ...; KB, MB, ...)", s)
	}
	mult := map[string]float64{"": 1, "B": 1,
		"K": 1 << 10, "KI": 1 << 10, "KIB": 1 << 10, "KB": 1e3,
		"M": 1 << 20, "MI": 1 << 20, "MIB": 1 << 20, "MB": 1e6,
		"G": 1 << 30, "GI": 1 << 30, "GIB": 1 << 30, "GB": 1e9,
		"T": 1 << 40, "TI": 1 << 40, "TIB": 1 << 40, "TB": 1e12}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("bad size %q: unknown unit %q", s, t[i:])
	}
	if f <= 0 {
		return -1, nil
	}
	return int64(f * mult), nil
}

func procLimitText(n int, enforced bool) string {
	switch {
	case n <= 0:
		return "no limit"
	case !enforced:
		return "not enforced (it needs a uid per sandbox: run the server as root)"
	}
	return strconv.Itoa(n)
}

func uidRangeText(own bool, base, count uint32) string {
	if !own {
		return "the server's own (the server is not root, or commands are not isolated)"
	}
	return fmt.Sprintf("%d-%d, one per sandbox", base, uint64(base)+uint64(count)-1)
}
