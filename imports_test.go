package forge_test

import (
	"os/exec"
	"strings"
	"testing"
)

// module is this module's path.
const module = "github.com/forge-runtime/forge"

// backends are the module's packages that wrap an SDK, a database driver
// or a process boundary: nothing on the data path above them imports one
// (DESIGN.md "Layout").
var backends = []string{"sqlite", "postgres", "redis", "provider", "mcp", "sandbox", "metrics", "opentelemetry", "schemas"}

// TestDependencies keeps the domain, the engine, the event log and the
// HTTP layer free of SDKs and database drivers: every package they depend
// on (go list -deps) is in the standard library or in this module, and
// none of this module's backends.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	for _, pkg := range []string{".", "./engine", "./eventlog", "./bus", "./httpapi", "./modelview"} {
		t.Run(strings.TrimPrefix(pkg, "./"), func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep != module && !strings.HasPrefix(dep, module+"/") {
					t.Errorf("%s depends on %s: only the standard library and this module are allowed", pkg, dep)
					continue
				}
				rel := strings.TrimPrefix(strings.TrimPrefix(dep, module), "/")
				for _, b := range backends {
					if rel == b || strings.HasPrefix(rel, b+"/") {
						t.Errorf("%s depends on the backend %s", pkg, dep)
					}
				}
			}
		})
	}
}

// TestEngineStandsApart: the engine imports neither the forum (which
// follows it) nor a bus (which the assembly chooses and hands it).
func TestEngineStandsApart(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", "./engine").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"forum", "bus", "redis", "server", "httpapi"} {
			if dep == module+"/"+banned || strings.HasPrefix(dep, module+"/"+banned+"/") {
				t.Errorf("the engine depends on %s", dep)
			}
		}
	}
}
