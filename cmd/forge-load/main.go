// Command forge-load puts load on a running forge serve and prints the
// figures recorded in docs/benchmarks.md.
//
//	forge-load turns    [--server URL] [--sessions N] [--duration D] [--max-turns N]
//	forge-load deltas   [--server URL] [--deltas N] [--chunk N] [--turns N] [--timeout D]
//	forge-load idle-sse [--server URL] [--subscribers N] [--duration D] [--pid P]
//	forge-load trivial  [--provider openai|scripted] [--turns N] [--warmup N] [--repeat N]
//	                    (--spawn [--forge-bin PATH] [--serve-arg FLAG]... | --server URL [--model-url URL])
//	forge-load realload [--scenarios paced,concurrent,subscribers,long,rss,disk] [--repeat N] [sizes...]
//	forge-load fake-model [--fake instant|openaitest] [--duration D]
//	forge-load distributed --postgres URL --redis URL[,URL...] [--replicas 1,3] [sizes...]
//
// turns creates an agent on scripted/echo (an instant model) and N sessions;
// a worker per session runs wait-mode turns back to back until --duration or
// --max-turns, then the command prints the count, turns/s and the latency
// percentiles. deltas runs one streamed turn whose scripted reply is --deltas
// small chunks and prints the deltas per second received over SSE. idle-sse
// opens --subscribers idle SSE subscriptions to session event streams, holds
// them for --duration and, with --pid, prints the server's RSS (from
// /proc/P/status) before and while they are open. trivial runs wait-mode
// turns one after the other on one session (the agent on openai/<model>
// behind a fake Chat Completions server, or on scripted/echo) and prints
// their p50/p90/p99 beside the floor: the same model call made directly;
// --spawn starts its own forge serve and fake model server. realload runs
// the scenarios of a real load (realload.go) against a forge serve of its
// own, printing each figure beside its floor, measured in the same run.
// distributed starts 1 and 3 forge serve replicas on a PostgreSQL and
// Redis (sharded when several URLs are given) behind counting proxies and
// prints the cost of a trivial turn and of a streamed delta in replica CPU,
// round trips, commits, commands, bytes and Redis CPU, the time of paced
// streams at 100 at once, the throughput, and a paper model for 10,000
// streaming turns (distributed.go).
//
// Only loopback servers are accepted, and every mode ends by itself: each
// loop is bounded in count and in time. Interrupting ends a run early.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "forge-load:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usage = `usage: forge-load MODE [flags]

modes:
  turns     wait-mode trivial turns on N sessions in parallel: turns/s and latency
  deltas    one streamed turn of N small deltas: deltas/s received over SSE
  idle-sse  N idle SSE subscribers held open: server RSS before and while open
  trivial   sequential trivial turns on one session, beside the model-call floor
  realload  a real load (paced deltas, long sessions, many readers and streams): each figure beside its floor
  fake-model  a fake OpenAI Chat Completions server answering "ok" at once
  distributed  1 and 3 replicas on PostgreSQL + Redis behind counting proxies: per-turn and per-delta costs, a paper model

"forge-load MODE -h" lists the flags of a mode.
`

// run runs one mode; out receives the report, errOut usage and flag errors.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(errOut, usage)
		return errUsage
	}
	var mode func(context.Context, []string, io.Writer, io.Writer) error
	switch args[0] {
	case "turns":
		mode = runTurns
	case "deltas":
		mode = runDeltas
	case "idle-sse":
		mode = runIdleSSE
	case "trivial":
		mode = runTrivial
	case "realload":
		mode = runRealload
	case "fake-model":
		mode = runFakeModel
	case "distributed":
		mode = runDistributed
	case "-h", "-help", "--help", "help":
		fmt.Fprint(out, usage)
		return nil
	default:
		fmt.Fprintf(errOut, "forge-load: unknown mode %q\n\n%s", args[0], usage)
		return errUsage
	}
	return mode(ctx, args[1:], out, errOut)
}

// parseFlags parses a mode's flags; a flag error is reported on errOut and
// returned as errUsage.
func parseFlags(fs *flag.FlagSet, args []string, errOut io.Writer) error {
	fs.SetOutput(errOut)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(errOut, "forge-load %s: unexpected arguments %q\n", fs.Name(), fs.Args())
		return errUsage
	}
	return nil
}
