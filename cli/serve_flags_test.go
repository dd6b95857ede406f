package cli

import (
	"strings"
	"testing"

	"github.com/forge-runtime/forge/sandbox"
)

// The sandbox's limits are forge serve flags; sizes take units, and a bad
// one is refused with a clear error.
func TestServeSandboxFlags(t *testing.T) {
	t.Parallel()
	cmd := newServeCommand()
	f := cmd.Flags()
	for name, want := range map[string]string{"sandbox-memory": "1 GiB", "sandbox-max-procs": "256", "sandbox-max-file-size": "1 GiB",
		"sandbox-tmp-size": "256 MiB", "sandbox-workspace-quota": "2 GiB", "sandbox-session-commands": "8",
		"sandbox-max-commands": "64", "sandbox-cpu-time": "0s", "max-parallel-tools": "16", "sandbox-max-snapshots": "100"} {
		if got := f.Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", name, got, want)
		}
	}
	if err := f.Parse([]string{"--sandbox-memory", "512M", "--sandbox-workspace-quota=10GiB", "--sandbox-tmp-size=off",
		"--sandbox-max-procs=100", "--sandbox-uid-base=2000000000", "--sandbox-uid-count=1"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"sandbox-memory": "512 MiB", "sandbox-workspace-quota": "10 GiB", "sandbox-tmp-size": "off"} {
		if got := f.Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
	err := newServeCommand().Flags().Parse([]string{"--sandbox-memory=lots"})
	if err == nil || !strings.Contains(err.Error(), "sandbox-memory") || !strings.Contains(err.Error(), "unit") {
		t.Fatalf("a bad size: %v", err)
	}
}

func TestSandboxFlagsToOptions(t *testing.T) {
	t.Parallel()
	o := sandboxFlags{memory: 1, maxFileSize: 2, tmpSize: -1, workspaceQuota: 4, maxProcs: 5, sessionCommands: 6, maxCommands: 7,
		cpuTime: 8, uidBase: 9, uidCount: 10, maxSnapshots: 11}.options(sandboxOptionsForTest())
	if o.MemoryLimit != 1 || o.MaxFileSize != 2 || o.TmpSize != -1 || o.WorkspaceQuota != 4 || o.MaxProcs != 5 ||
		o.SessionCommands != 6 || o.MaxCommands != 7 || o.CPUTime != 8 || o.UIDBase != 9 || o.UIDCount != 10 || o.MaxSnapshots != 11 || !o.UnsafeUnsandboxedCommands {
		t.Fatalf("options %+v", o)
	}
}

func sandboxOptionsForTest() sandbox.Options { return sandbox.Options{UnsafeUnsandboxedCommands: true} }
