// Package cli is the forge command line: serve, chat, forum, sessions, show,
// keys, migrate, version.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Version, when set at build time with -ldflags "-X .../cli.Version=...",
// is the version forge reports; otherwise the module build info gives it.
var Version string

// version is what forge version prints: Version, or the main module's
// version from the build info (a tag for `go install ...@v1.2.3`, a
// pseudo-version with the commit for a `go build` in a git checkout), with
// the commit and the Go version when known.
func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (built without module support)"
	}
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var facts []string
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		c := "commit " + rev[:min(12, len(rev))]
		if at != "" {
			c += " of " + at
		}
		facts = append(facts, c)
	}
	if dirty && !strings.HasSuffix(v, "+dirty") {
		facts = append(facts, "modified")
	}
	if bi.GoVersion != "" {
		facts = append(facts, bi.GoVersion)
	}
	if len(facts) > 0 {
		v += " (" + strings.Join(facts, ", ") + ")"
	}
	return v
}

// Main runs the CLI with args and returns the process exit code.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRootCommand()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		if !errors.As(err, new(reportedError)) {
			fmt.Fprintln(os.Stderr, "forge:", err)
		}
		return 1
	}
	return 0
}

// NewRootCommand builds the command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "forge",
		Short:         "Forge: a durable agent runtime",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand(), newServeCommand(), newPruneCommand(), newChatCommand(), newForumCommand(),
		newSessionsCommand(), newShowCommand(), newWebhooksCommand(), newSchedulesCommand(), newKeysCommand(), newMigrateCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "forge", version())
			return nil
		},
	}
}
