// Package cli is the forge command line: serve, chat, keys, migrate, version.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X .../cli.Version=...".
var Version = "dev"

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
	root.AddCommand(newVersionCommand(), newServeCommand(), newChatCommand(), newKeysCommand(), newMigrateCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "forge", Version)
			return nil
		},
	}
}
