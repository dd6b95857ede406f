package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/retention"
	"github.com/forge-runtime/forge/server"
)

// newPruneCommand is forge prune: the retention sweep, once, with one TTL
// for every direct session (API.md, "Retention and listing").
func newPruneCommand() *cobra.Command {
	var db string
	var olderThan time.Duration
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION",
		Short: "Delete direct sessions idle for longer than DURATION, purge deleted sessions and reclaim the space",
		Long: `prune deletes every direct session idle for longer than --older-than (whatever
its agent's retention), with its turns, events and the files no other message
references, purges the rows of sessions deleted before, and returns the freed
space to the file system (SQLite databases created by this version; older ones
keep it for reuse). It may run beside forge serve: a session a turn is using is
left alone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return forge.Errorf(forge.ErrInvalid, "--older-than is required and must be positive (e.g. 720h)")
			}
			ctx := cmd.Context()
			s, err := server.OpenStore(ctx, db)
			if err != nil {
				return err
			}
			defer s.Close(ctx)
			sw := retention.New(retention.Config{Store: s, PurgeAfter: 0, Pace: -1})
			var total retention.Stats
			for {
				st, err := sw.Sweep(ctx, olderThan)
				if err != nil {
					return err
				}
				if st.Skipped {
					return fmt.Errorf("another process is sweeping this database; try again later")
				}
				total.Expired += st.Expired
				total.Purged += st.Purged
				total.Rows += st.Rows
				total.Files += st.Files
				total.Pages += st.Pages
				if st.Expired == 0 && st.Purged == 0 {
					break
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %d sessions, purged %d (%d rows, %d files), reclaimed %d pages\n",
				total.Expired, total.Purged, total.Rows, total.Files, total.Pages)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", defaultDB, dbFlagHelp)
	f.DurationVar(&olderThan, "older-than", 0, "idle time after which a direct session is deleted (required)")
	return cmd
}
