package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// forge webhooks and forge schedules: the tenant's webhooks (with their
// recent deliveries) and schedules (with their runs), on a running server.

// collect reads the pages of a list, up to limit items (0: all); more
// reports whether items were left.
func collect[T any](ctx context.Context, limit int, page func(ctx context.Context, opts client.ListOptions) (*client.Page[T], error)) (all []T, more bool, err error) {
	size := pageSize
	if limit > 0 && limit < size {
		size = limit
	}
	for cursor := ""; ; {
		p, err := page(ctx, client.ListOptions{Limit: size, Cursor: cursor})
		if err != nil {
			return nil, false, err
		}
		all = append(all, p.Data...)
		cursor = p.NextCursor
		if limit > 0 && len(all) >= limit {
			return all[:limit], len(all) > limit || cursor != "", nil
		}
		if cursor == "" {
			return all, false, nil
		}
	}
}

// opsCommand is one subcommand of webhooks or schedules: it gets a
// client, and its errors are described as the other client commands do.
func opsCommand(sf *serverFlags, use, short string, args cobra.PositionalArgs, run func(ctx context.Context, c *client.Client, out io.Writer, args []string) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sf.client("forge-" + strings.Fields(cmd.CommandPath())[1])
			if err != nil {
				return err
			}
			if err := run(cmd.Context(), c, cmd.OutOrStdout(), args); err != nil {
				return errors.New(describe(err, c))
			}
			return nil
		},
	}
	sf.register(cmd.Flags())
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return when(*t)
}

func strPtr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ---- webhooks

func newWebhooksCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "List, create and delete webhooks, and see their deliveries",
		Long: `Manage the webhooks of a running Forge server's tenant: each signed POST
(Standard Webhooks) of the events it subscribes to (` + strings.Join(forge.WebhookEvents, ", ") + `).`,
		Args: cobra.NoArgs,
	}
	var (
		listF, createF, deleteF, delivF serverFlags
		asJSON, createJSON, delivJSON   bool
		events                          []string
		description                     string
		delivLimit                      int
	)
	list := opsCommand(&listF, "list", "List the webhooks", cobra.NoArgs, func(ctx context.Context, c *client.Client, out io.Writer, _ []string) error {
		all, _, err := collect(ctx, 0, c.ListWebhooks)
		if err != nil {
			return err
		}
		if asJSON {
			if all == nil {
				all = []forge.Webhook{}
			}
			return writeJSON(out, all)
		}
		if len(all) == 0 {
			_, err := fmt.Fprintln(out, "no webhooks")
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tURL\tEVENTS\tCREATED\tDESCRIPTION")
		for _, w := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", safe(w.ID, 60), safe(w.URL, 100), safe(strings.Join(w.Events, ","), 60),
				when(w.CreatedAt), safe(w.Description, 60))
		}
		return tw.Flush()
	})
	list.Flags().BoolVar(&asJSON, "json", false, "print the webhooks as a JSON array")

	create := opsCommand(&createF, "create URL", "Create a webhook; prints its secret, shown only this once", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			if len(events) == 0 {
				events = forge.WebhookEvents
			}
			w, err := c.CreateWebhook(ctx, client.CreateWebhookRequest{URL: args[0], Events: events, Description: description})
			if err != nil {
				return err
			}
			if createJSON {
				return writeJSON(out, w)
			}
			_, err = fmt.Fprintf(out, "created webhook %s for %s (%s)\nsecret (shown only now): %s\n",
				safe(w.ID, 60), safe(w.URL, 200), safe(strings.Join(w.Events, ", "), 100), safe(w.Secret, 200))
			return err
		})
	create.Flags().StringArrayVar(&events, "event", nil, "an event to deliver (repeatable; default: all of "+strings.Join(forge.WebhookEvents, ", ")+")")
	create.Flags().StringVar(&description, "description", "", "what the webhook is for")
	create.Flags().BoolVar(&createJSON, "json", false, "print the created webhook (with its secret) as JSON")

	del := opsCommand(&deleteF, "delete ID", "Delete a webhook (its pending deliveries are dropped)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			if err := c.DeleteWebhook(ctx, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "deleted webhook %s\n", safe(args[0], 60))
			return err
		})

	deliveries := opsCommand(&delivF, "deliveries ID", "List a webhook's recent deliveries, newest first", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			all, more, err := collect(ctx, delivLimit, func(ctx context.Context, o client.ListOptions) (*client.Page[forge.WebhookDelivery], error) {
				return c.ListWebhookDeliveries(ctx, args[0], o)
			})
			if err != nil {
				return err
			}
			if delivJSON {
				if all == nil {
					all = []forge.WebhookDelivery{}
				}
				return writeJSON(out, all)
			}
			if len(all) == 0 {
				_, err := fmt.Fprintln(out, "no deliveries")
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tEVENT\tSESSION\tATTEMPTS\tCODE\tLAST ATTEMPT\tNEXT RETRY\tERROR")
			for _, d := range all {
				code, next := "-", "-"
				if d.ResponseCode != 0 {
					code = strconv.Itoa(d.ResponseCode)
				}
				if d.Status == forge.DeliveryPending {
					next = whenPtr(d.NextAttemptAt)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", safe(d.ID, 60), safe(d.Status, 20), safe(d.EventType, 30),
					safe(orDash(d.SessionID), 60), d.Attempts, code, whenPtr(d.LastAttemptAt), next, safe(orDash(d.Error), 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(out, "(older deliveries not shown; --limit 0 lists all)\n")
			}
			return nil
		})
	deliveries.Flags().IntVar(&delivLimit, "limit", 20, "how many deliveries to list (0: all)")
	deliveries.Flags().BoolVar(&delivJSON, "json", false, "print the deliveries as a JSON array")

	cmd.AddCommand(list, create, del, deliveries)
	return cmd
}

// ---- schedules

func scheduleWhen(s *forge.Schedule) string {
	if s.Cron != "" {
		tz := s.Timezone
		if tz == "" {
			tz = "UTC"
		}
		return "cron " + s.Cron + " (" + tz + ")"
	}
	return "every " + s.Every
}

func scheduleState(s *forge.Schedule) (state, next string) {
	if s.Paused {
		return "paused", "-"
	}
	return "active", when(s.NextRunAt)
}

func newSchedulesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List, create, pause, resume and delete schedules, and see their runs",
		Long: `Manage the schedules of a running Forge server's tenant: turns an agent runs
on a cron expression (in a time zone) or every interval, each run an ordinary turn.`,
		Args: cobra.NoArgs,
	}
	var (
		listF, createF, pauseF, resumeF, deleteF, runsF serverFlags
		listJSON, createJSON, runsJSON                  bool
		req                                             client.CreateScheduleRequest
		message, session                                string
		runsLimit                                       int
	)
	list := opsCommand(&listF, "list", "List the schedules", cobra.NoArgs, func(ctx context.Context, c *client.Client, out io.Writer, _ []string) error {
		all, _, err := collect(ctx, 0, c.ListSchedules)
		if err != nil {
			return err
		}
		if listJSON {
			if all == nil {
				all = []forge.Schedule{}
			}
			return writeJSON(out, all)
		}
		if len(all) == 0 {
			_, err := fmt.Fprintln(out, "no schedules")
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAGENT\tWHEN\tSTATE\tNEXT RUN\tSESSION")
		for i := range all {
			s := &all[i]
			state, next := scheduleState(s)
			ses := strPtr(s.SessionID)
			if ses == "" {
				ses = "new each run"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", safe(s.ID, 60), safe(s.Agent, 40), safe(scheduleWhen(s), 60), state, next, safe(ses, 60))
		}
		return tw.Flush()
	})
	list.Flags().BoolVar(&listJSON, "json", false, "print the schedules as a JSON array")

	create := opsCommand(&createF, "create AGENT", "Create a schedule of an agent (--cron or --every, and --message)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			if (req.Cron == "") == (req.Every == "") {
				return errors.New("give one of --cron EXPR or --every DURATION")
			}
			if strings.TrimSpace(message) == "" {
				return errors.New("--message is required: what each run asks the agent")
			}
			r := req
			r.Agent = args[0]
			r.Input = []forge.Input{{Type: forge.InputMessage, Text: message}}
			if session != "" {
				r.SessionID = &session
			}
			s, err := c.CreateSchedule(ctx, r)
			if err != nil {
				return err
			}
			if createJSON {
				return writeJSON(out, s)
			}
			state, next := scheduleState(s)
			_, err = fmt.Fprintf(out, "created schedule %s of %s: %s, %s, next run %s\n", safe(s.ID, 60), safe(s.Agent, 40), safe(scheduleWhen(s), 60), state, next)
			return err
		})
	f := create.Flags()
	f.StringVar(&req.Cron, "cron", "", `a cron expression, e.g. "0 8 * * 1-5"`)
	f.StringVar(&req.Timezone, "timezone", "", "the cron expression's IANA time zone (default UTC)")
	f.StringVar(&req.Every, "every", "", `an interval instead of --cron, e.g. "30s" or "1h"`)
	f.StringVar(&message, "message", "", "the message each run sends")
	f.StringVar(&session, "session", "", "a session every run continues (default: a new session per run)")
	f.StringVar(&req.CatchUp, "catch-up", "", "slots missed while no server ran: once (default) or skip")
	f.BoolVar(&req.Paused, "paused", false, "create it paused")
	f.BoolVar(&createJSON, "json", false, "print the created schedule as JSON")

	setPaused := func(sf *serverFlags, use, short string, paused bool) *cobra.Command {
		return opsCommand(sf, use, short, cobra.ExactArgs(1), func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			s, err := c.PatchSchedule(ctx, args[0], client.PatchScheduleRequest{Paused: &paused})
			if err != nil {
				return err
			}
			state, next := scheduleState(s)
			_, err = fmt.Fprintf(out, "schedule %s is %s (next run %s)\n", safe(s.ID, 60), state, next)
			return err
		})
	}
	pause := setPaused(&pauseF, "pause ID", "Pause a schedule: no run until it is resumed", true)
	resume := setPaused(&resumeF, "resume ID", "Resume a paused schedule", false)

	del := opsCommand(&deleteF, "delete ID", "Delete a schedule (its runs' turns stay)", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			if err := c.DeleteSchedule(ctx, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(out, "deleted schedule %s\n", safe(args[0], 60))
			return err
		})

	runs := opsCommand(&runsF, "runs ID", "List a schedule's runs and the turns they started", cobra.ExactArgs(1),
		func(ctx context.Context, c *client.Client, out io.Writer, args []string) error {
			all, more, err := collect(ctx, runsLimit, func(ctx context.Context, o client.ListOptions) (*client.Page[forge.ScheduleRun], error) {
				return c.ListScheduleRuns(ctx, args[0], o)
			})
			if err != nil {
				return err
			}
			if runsJSON {
				if all == nil {
					all = []forge.ScheduleRun{}
				}
				return writeJSON(out, all)
			}
			if len(all) == 0 {
				_, err := fmt.Fprintln(out, "no runs")
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSLOT\tSTATUS\tSESSION\tTURN\tTURN STATUS\tERROR")
			for _, r := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(r.ID, 60), when(r.Slot), safe(r.Status, 20),
					safe(orDash(strPtr(r.SessionID)), 60), safe(orDash(strPtr(r.TurnID)), 60), safe(orDash(r.TurnStatus), 20), safe(orDash(r.Error), 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(out, "(older runs not shown; --limit 0 lists all)\n")
			}
			return nil
		})
	runs.Flags().IntVar(&runsLimit, "limit", 20, "how many runs to list (0: all)")
	runs.Flags().BoolVar(&runsJSON, "json", false, "print the runs as a JSON array")

	cmd.AddCommand(list, create, pause, resume, del, runs)
	return cmd
}
