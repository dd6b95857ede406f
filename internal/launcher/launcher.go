// Package launcher is the first thing a sandboxed command runs: the
// server's own binary, re-executed through /proc/self/exe under the name
// Arg0, applies what os/exec cannot — resource limits; when the server is
// root, a private mount namespace in which the sandbox's directories are
// staged where an unprivileged bubblewrap can reach them, and the switch to
// the sandbox's uid — and then executes the program (bubblewrap).
//
// It runs in this package's init, before almost every other package of the
// binary is initialized (it imports only runtime and syscall), so a launch
// costs little more than the exec of the binary. The sandbox package
// builds its command line (Args) and imports it, so every binary that runs
// sandboxes can launch them.
//
// The command line is Arg0, then directives, then "--", then the program's
// absolute path and arguments. Directives:
//
//	rlimit=RESOURCE:CUR:MAX   setrlimit (numbers), before the switch of uid
//	stage=ro:NAME:PATH        bind PATH read-only at StageDir/NAME (rw: read-write)
//	user=UID:GID              run as UID:GID with no supplementary group
//
// A launch that fails writes "sandbox: cannot start the command: ..." on
// stderr and exits with Failed.
package launcher

// Arg0 is the argv[0] that makes the binary act as the launcher.
const Arg0 = "forge-sandbox-exec"

// Path is what the server executes: its own binary (the running one, even
// if the file was replaced since).
const Path = "/proc/self/exe"

// Failed is the exit status of a launch that could not start the program.
const Failed = 125

// StageDir is where, in the launcher's private mount namespace, staged
// paths are bound: a tmpfs covers it there (the host's is untouched), and
// nothing the sandbox binds comes from it except what is staged. The
// server's own paths may pass through directories only root may enter
// (/root, a 0700 data directory), which an unprivileged bubblewrap could
// not bind from.
const StageDir = "/tmp"

// Staged is the path at which a stage=…:NAME:… directive binds its path.
func Staged(name string) string { return StageDir + "/" + name }
