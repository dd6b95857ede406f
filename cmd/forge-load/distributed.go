package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// The distributed mode: what several `forge serve` replicas cost on a
// PostgreSQL and one or more Redis servers (loopback only). For each
// number of replicas (a unit) it makes a fresh database, puts a counting
// TCP proxy in front of PostgreSQL and of each Redis server (round trips:
// a client write after the server has answered; bytes both ways), starts
// the replicas through the proxies with the instant fake model (a process
// of its own), and measures:
//
//   - trivial turns one after another (wait mode; turn i on replica i mod
//     R, each replica on a session of its own): p50, replica CPU
//     (/proc/PID/stat), PostgreSQL round trips and commits
//     (pg_stat_database.xact_commit), Redis round trips, commands (INFO
//     commandstats) and bytes, and Redis CPU (INFO cpu), per turn;
//   - --streams paced streamed turns at once (the fake's paced-NxD model):
//     how long each stream takes against the model's own duration, and
//     replica CPU, Redis CPU, Redis round trips and bytes per delta (net of
//     a trivial turn's cost);
//   - throughput: --throughput-sessions sessions running trivial turns back
//     to back for --throughput-duration;
//
// then a paper model: replica and Redis cores (and PostgreSQL commits/s)
// for 10,000 concurrent streaming turns of 20 s and 1,000 deltas each,
// from the per-turn and per-delta figures.

type distConfig struct {
	postgres      string
	redis         []string
	replicas      []int
	trivialTurns  int
	warmup        int
	streams       int
	deltas        int
	pace          time.Duration
	tputSessions  int
	tputDuration  time.Duration
	lease         time.Duration
	forgeBin      string
	serveArgs     []string
	timeout       time.Duration
	keepDatabases bool
	cpuProfiles   string // a directory: each replica's CPU profile of the paced streams
}

func runDistributed(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("distributed", flag.ContinueOnError)
	var c distConfig
	fs.StringVar(&c.postgres, "postgres", os.Getenv("FORGE_TEST_POSTGRES_URL"), "PostgreSQL URL of a role that may CREATE DATABASE (loopback only; env FORGE_TEST_POSTGRES_URL); each unit runs on a fresh database, dropped after")
	redisURLs := fs.String("redis", os.Getenv("FORGE_TEST_REDIS_URL"), "Redis URL, or a comma-separated list to shard over (loopback only; env FORGE_TEST_REDIS_URL)")
	replicas := intList{1, 3}
	fs.Var(&replicas, "replicas", "units: numbers of forge serve replicas, comma-separated (each 1..16; 0 is a single node on SQLite, no PostgreSQL or Redis, for the comparison)")
	fs.IntVar(&c.trivialTurns, "trivial-turns", 200, "trivial turns timed one after another (1..100000)")
	fs.IntVar(&c.warmup, "warmup", 10, "untimed trivial turns per replica first (0..1000)")
	fs.IntVar(&c.streams, "streams", 100, "paced streamed turns at once (1..1000)")
	fs.IntVar(&c.deltas, "deltas", 100, "deltas per streamed turn (1..100000)")
	fs.DurationVar(&c.pace, "pace", 20*time.Millisecond, "the model's pause between deltas (0..1s): 100 x 20ms is a 2.0 s stream")
	fs.IntVar(&c.tputSessions, "throughput-sessions", 100, "sessions running trivial turns back to back for the throughput (1..1000)")
	fs.DurationVar(&c.tputDuration, "throughput-duration", 10*time.Second, "how long the throughput runs (100ms..10m)")
	fs.DurationVar(&c.lease, "lease", 10*time.Second, "the replicas' --lease")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Minute, "longest one unit may take (up to 6h)")
	fs.StringVar(&c.forgeBin, "forge-bin", "", "the forge binary to run (default: forge next to forge-load, else on $PATH)")
	fs.BoolVar(&c.keepDatabases, "keep-databases", false, "do not drop the units' databases")
	fs.StringVar(&c.cpuProfiles, "cpu-profiles", "", "a directory to write each replica's CPU profile of the paced streams to (replicas-R-I.pprof; the replicas then run --pprof-addr, which also samples blocking)")
	var serveArgs stringList
	fs.Var(&serveArgs, "serve-arg", "a flag for every replica (repeatable)")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	c.replicas, c.serveArgs = replicas, serveArgs
	if *redisURLs != "" {
		for u := range strings.SplitSeq(*redisURLs, ",") {
			c.redis = append(c.redis, strings.TrimSpace(u))
		}
	}
	if err := c.check(); err != nil {
		return err
	}
	bin, err := findForge(c.forgeBin)
	if err != nil {
		return err
	}
	c.forgeBin = bin

	admin, err := pgx.Connect(ctx, c.postgres)
	if err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	var fsync, syncCommit, version string
	if err := admin.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('server_version')`).Scan(&fsync, &syncCommit, &version); err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	rcs := make([]*goredis.Client, len(c.redis))
	for i, u := range c.redis {
		o, _ := goredis.ParseURL(u) // checked
		rcs[i] = goredis.NewClient(o)
		defer rcs[i].Close()
		if err := rcs[i].Ping(ctx).Err(); err != nil {
			return fmt.Errorf("--redis %s: %w", u, err)
		}
	}
	fmt.Fprintf(out, "forge-load distributed: %s; PostgreSQL %s (fsync=%s, synchronous_commit=%s); %s; %d CPUs, load average %s\n",
		bin, version, fsync, syncCommit, plural(len(c.redis), "Redis server"), runtime.NumCPU(), loadAverage())
	if fsync != "on" {
		fmt.Fprintln(out, "note: fsync is off: commits cost no disk flush here (docs/benchmarks.md says how to turn it on)")
	}
	command, env, err := fakeCommand([]string{"--fake", "instant", "--until-stdin-closes"})
	if err != nil {
		return err
	}
	fake, err := startRemoteFake(ctx, command, env)
	if err != nil {
		return err
	}
	defer fake.Close()
	var units []distFigures
	for _, n := range c.replicas {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := c.runUnit(ctx, admin, rcs, fake, n, out)
		if err != nil {
			return fmt.Errorf("%s: %w", plural(n, "replica"), err)
		}
		units = append(units, f)
	}
	printPaperModel(out, units)
	printUnits(out, units)
	return nil
}

// printUnits prints the units' figures side by side, a column each.
func printUnits(out io.Writer, units []distFigures) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\n== side by side\nper unit")
	for _, f := range units {
		if f.replicas == 0 {
			fmt.Fprint(tw, "\tSQLite node")
		} else {
			fmt.Fprintf(tw, "\tPG + Redis, %s", plural(f.replicas, "replica"))
		}
	}
	fmt.Fprintln(tw)
	row := func(name string, cell func(f distFigures) string) {
		fmt.Fprint(tw, name)
		for _, f := range units {
			fmt.Fprint(tw, "\t"+cell(f))
		}
		fmt.Fprintln(tw)
	}
	dist := func(cell func(f distFigures) string) func(f distFigures) string {
		return func(f distFigures) string {
			if f.replicas == 0 {
				return "-"
			}
			return cell(f)
		}
	}
	row("trivial turn p50", func(f distFigures) string { return ms(f.turnP50) })
	row("Forge CPU per trivial turn", func(f distFigures) string { return ms(f.turnCPU) })
	row("PostgreSQL round trips per trivial turn", dist(func(f distFigures) string { return fmt.Sprintf("%.2f", f.turnPGTrips) }))
	row("PostgreSQL transactions per trivial turn", dist(func(f distFigures) string { return fmt.Sprintf("%.2f", f.turnCommits) }))
	row("PostgreSQL CPU per trivial turn", dist(func(f distFigures) string { return ms(f.turnPGCPU) }))
	row("Redis round trips per trivial turn", dist(func(f distFigures) string { return fmt.Sprintf("%.2f", f.turnRedisTrips) }))
	multi := func(cell func(f distFigures) string) func(f distFigures) string {
		return func(f distFigures) string {
			if f.replicas < 2 {
				return "-"
			}
			return cell(f)
		}
	}
	row("trivial turn p50, replica switched", multi(func(f distFigures) string { return ms(f.switchP50) }))
	row("PostgreSQL round trips, transactions, switched", multi(func(f distFigures) string {
		return fmt.Sprintf("%.2f, %.2f", f.switchPGTrips, f.switchCommits)
	}))
	row("Forge CPU per streamed delta", func(f distFigures) string { return us(f.deltaCPU) })
	row("Redis CPU per delta", dist(func(f distFigures) string { return us(f.deltaRedisCPU) }))
	row("PostgreSQL CPU per delta", dist(func(f distFigures) string { return us(f.deltaPGCPU) }))
	row("Redis round trips per delta", dist(func(f distFigures) string { return fmt.Sprintf("%.2f", f.deltaRedisTrips) }))
	row("stream p50 / p99", func(f distFigures) string {
		return fmt.Sprintf("%.2f / %.2f s (model %.2f s)", f.streamP50.Seconds(), f.streamP99.Seconds(), f.streamDur.Seconds())
	})
	row("throughput", func(f distFigures) string { return fmt.Sprintf("%.0f turns/s", f.throughput) })
	tw.Flush()
}

func (c *distConfig) check() error {
	switch {
	case c.postgres == "":
		return errors.New("--postgres is required (or FORGE_TEST_POSTGRES_URL: ./scripts/test --exec starts one)")
	case len(c.redis) == 0:
		return errors.New("--redis is required (or FORGE_TEST_REDIS_URL)")
	case len(c.replicas) == 0 || slices.ContainsFunc(c.replicas, func(n int) bool { return n < 0 || n > 16 }):
		return errors.New("--replicas must list numbers 0..16")
	case c.trivialTurns < 1 || c.trivialTurns > 100_000:
		return errors.New("--trivial-turns must be 1..100000")
	case c.warmup < 0 || c.warmup > 1000:
		return errors.New("--warmup must be 0..1000")
	case c.streams < 1 || c.streams > 1000:
		return errors.New("--streams must be 1..1000")
	case c.deltas < 1 || c.deltas > 100_000:
		return errors.New("--deltas must be 1..100000")
	case c.pace < 0 || c.pace > time.Second:
		return errors.New("--pace must be 0..1s")
	case c.tputSessions < 1 || c.tputSessions > 1000:
		return errors.New("--throughput-sessions must be 1..1000")
	case c.tputDuration < 100*time.Millisecond || c.tputDuration > 10*time.Minute:
		return errors.New("--throughput-duration must be 100ms..10m")
	case c.lease < 300*time.Millisecond:
		return errors.New("--lease must be at least 300ms")
	case c.timeout <= 0 || c.timeout > 6*time.Hour:
		return errors.New("--timeout must be more than 0 and at most 6h")
	}
	pc, err := pgx.ParseConfig(c.postgres)
	if err != nil {
		return fmt.Errorf("--postgres: %w", err)
	}
	if !loopbackHost(pc.Host) {
		return fmt.Errorf("--postgres: host %q: only loopback servers (127.0.0.0/8, ::1, localhost) are accepted", pc.Host)
	}
	seen := map[string]bool{}
	for _, u := range c.redis {
		o, err := goredis.ParseURL(u)
		if err != nil {
			return fmt.Errorf("--redis %q: %w", u, err)
		}
		host, _, _ := net.SplitHostPort(o.Addr)
		if !loopbackHost(host) {
			return fmt.Errorf("--redis %q: only loopback servers (127.0.0.0/8, ::1, localhost) are accepted", u)
		}
		if seen[o.Addr] {
			return fmt.Errorf("--redis: %s is listed twice", o.Addr)
		}
		seen[o.Addr] = true
	}
	return nil
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// distFigures are one unit's measurements, for the paper model.
type distFigures struct {
	replicas int
	// per trivial turn
	turnP50, turnCPU, turnRedisCPU time.Duration
	turnPGCPU                      time.Duration
	turnCommits, turnPGTrips       float64
	turnRedisTrips                 float64
	// per trivial turn on another replica than the session's last one
	switchP50                    time.Duration
	switchPGTrips, switchCommits float64
	// per streamed turn and per delta, net of a trivial turn
	streamCommits           float64
	streamDur               time.Duration // the model's own
	streamP50, streamP99    time.Duration // what the streams took
	deltaCPU, deltaRedisCPU time.Duration
	deltaPGCPU              time.Duration
	deltaRedisTrips         float64
	throughput              float64 // trivial turns/s
}

// unit is one number of replicas on a fresh database, behind proxies.
type unit struct {
	c       *distConfig
	admin   *pgx.Conn
	rcs     []*goredis.Client
	db      string
	pgProxy *countingProxy
	rProxy  []*countingProxy
	reps    []*spawned
	single  bool // one forge serve on SQLite: no database of the admin's, no proxies, no Redis
	targets []*target
}

func (c *distConfig) runUnit(ctx context.Context, admin *pgx.Conn, rcs []*goredis.Client, fake *remoteFake, n int, out io.Writer) (f distFigures, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := &unit{c: c, admin: admin, rcs: rcs, db: fmt.Sprintf("forge_load_%d_%d", time.Now().UnixNano(), n)}
	defer func() {
		if err != nil {
			u.printLogs(out)
		}
		if cerr := u.close(); err == nil {
			err = cerr
		}
	}()
	if n == 0 {
		return u.runSingle(ctx, fake, out)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+u.db); err != nil {
		return f, fmt.Errorf("creating the database: %w", err)
	}
	pc, _ := pgx.ParseConfig(c.postgres)
	if u.pgProxy, err = startProxy(net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))); err != nil {
		return f, err
	}
	pgURL, err := rewriteURL(c.postgres, u.pgProxy.addr(), "/"+u.db)
	if err != nil {
		return f, err
	}
	var redisURLs []string
	for _, r := range c.redis {
		o, _ := goredis.ParseURL(r)
		p, err := startProxy(o.Addr)
		if err != nil {
			return f, err
		}
		u.rProxy = append(u.rProxy, p)
		ru, err := rewriteURL(r, p.addr(), "")
		if err != nil {
			return f, err
		}
		redisURLs = append(redisURLs, ru)
	}
	dir, err := os.MkdirTemp("", "forge-load-dist-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	conns := max(c.streams, c.tputSessions)/n + 16
	for i := range n {
		args := append([]string{"--db", pgURL, "--redis", strings.Join(redisURLs, ","), "--lease", c.lease.String(),
			"--sandbox-root", fmt.Sprintf("%s/sandboxes-%d", dir, i)}, c.serveArgs...)
		if c.cpuProfiles != "" {
			args = append(args, "--pprof-addr=127.0.0.1:0")
		}
		sp, err := startServe(ctx, c.forgeBin, fake.URL(), args)
		if err != nil {
			return f, err
		}
		u.reps = append(u.reps, sp)
		cm := common{server: sp.url}
		t, err := cm.connect(ctx, conns)
		if err != nil {
			return f, err
		}
		u.targets = append(u.targets, t)
	}
	pids := make([]string, n)
	for i, r := range u.reps {
		pids[i] = strconv.Itoa(r.pid)
	}
	fmt.Fprintf(out, "\n== %s (pids %s) on database %s, through counting proxies\n", plural(n, "replica"), strings.Join(pids, ","), u.db)
	return u.measure(ctx, out)
}

// runSingle measures one forge serve on SQLite (a file in a temporary
// directory): the single node the replicas are compared with.
func (u *unit) runSingle(ctx context.Context, fake *remoteFake, out io.Writer) (distFigures, error) {
	u.single = true
	dir, err := os.MkdirTemp("", "forge-load-single-")
	if err != nil {
		return distFigures{}, err
	}
	defer os.RemoveAll(dir)
	args := append([]string{"--db", filepath.Join(dir, "forge.db"), "--sandbox-root", filepath.Join(dir, "sandboxes")}, u.c.serveArgs...)
	if u.c.cpuProfiles != "" {
		args = append(args, "--pprof-addr=127.0.0.1:0")
	}
	sp, err := startServe(ctx, u.c.forgeBin, fake.URL(), args)
	if err != nil {
		return distFigures{}, err
	}
	u.reps = append(u.reps, sp)
	cm := common{server: sp.url}
	t, err := cm.connect(ctx, max(u.c.streams, u.c.tputSessions)+16)
	if err != nil {
		return distFigures{}, err
	}
	u.targets = append(u.targets, t)
	fmt.Fprintf(out, "\n== a single node on SQLite (pid %d): no PostgreSQL, no Redis\n", sp.pid)
	return u.measure(ctx, out)
}

// measure runs the unit's three parts on its replicas.
func (u *unit) measure(ctx context.Context, out io.Writer) (f distFigures, err error) {
	f.replicas = len(u.reps)
	if u.single {
		f.replicas = 0
	}
	if err := u.trivial(ctx, &f, out); err != nil {
		return f, fmt.Errorf("trivial turns: %w", err)
	}
	if err := u.paced(ctx, &f, out); err != nil {
		return f, fmt.Errorf("paced streams: %w", err)
	}
	if err := u.throughput(ctx, &f, out); err != nil {
		return f, fmt.Errorf("throughput: %w", err)
	}
	return f, nil
}

// printLogs prints the end of each replica's log (what it wrote at
// --log-level warn), for a unit that failed.
func (u *unit) printLogs(out io.Writer) {
	const tail = 8 << 10
	for i, r := range u.reps {
		l := r.logs.String()
		if len(l) > tail {
			l = "..." + l[len(l)-tail:]
		}
		fmt.Fprintf(out, "-- replica %d (pid %d) logged:\n%s\n", i, r.pid, l)
	}
}

func (u *unit) close() error {
	var errs []error
	for _, t := range u.targets {
		t.close()
	}
	for _, r := range u.reps {
		if err := r.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if u.pgProxy != nil {
		u.pgProxy.close()
	}
	for _, p := range u.rProxy {
		p.close()
	}
	if !u.c.keepDatabases && !u.single {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := u.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+u.db+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("dropping %s: %w", u.db, err))
		}
	}
	return errors.Join(errs...)
}

// rewriteURL is raw with its host:port replaced by addr (and its path by
// path, when given).
func rewriteURL(raw, addr, path string) (string, error) {
	pu, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	pu.Host = addr
	if path != "" {
		pu.Path = path
	}
	return pu.String(), nil
}

// sessions makes an agent on model (through the first replica) and n
// sessions of it, session i meant for replica i mod R.
func (u *unit) sessions(ctx context.Context, model string, n int) (string, []string, error) {
	agent, err := u.targets[0].createAgentOn(ctx, trivialAgent("openai", model))
	if err != nil {
		return "", nil, err
	}
	ids, err := u.targets[0].createSessions(ctx, agent, n)
	return agent, ids, err
}

func (u *unit) trivial(ctx context.Context, f *distFigures, out io.Writer) error {
	n := len(u.targets)
	_, ids, err := u.sessions(ctx, "gpt-test", n)
	if err != nil {
		return err
	}
	body := turnBody("hi", false)
	for i := range u.c.warmup * n {
		if _, err := u.targets[i%n].waitTurn(ctx, ids[i%n], body); err != nil {
			return err
		}
	}
	lat, d, err := u.timeTurns(ctx, u.c.trivialTurns, func(i int) (*target, string) { return u.targets[i%n], ids[i%n] })
	if err != nil {
		return err
	}
	k := float64(u.c.trivialTurns)
	f.turnCPU = d.cpu / time.Duration(u.c.trivialTurns)
	f.turnRedisCPU = d.redisCPU / time.Duration(u.c.trivialTurns)
	f.turnPGCPU = d.pgCPU / time.Duration(u.c.trivialTurns)
	f.turnCommits = float64(d.commits) / k
	f.turnP50, f.turnPGTrips, f.turnRedisTrips = percentile(lat, 0.5), float64(d.pgTrips)/k, float64(d.redisTrips)/k
	fmt.Fprintf(out, "trivial turn (wait mode, %d one after another)  p50 %s  p90 %s  p99 %s\n", u.c.trivialTurns,
		ms(percentile(lat, 0.5)), ms(percentile(lat, 0.9)), ms(percentile(lat, 0.99)))
	if u.single {
		fmt.Fprintf(out, "  per trivial turn: Forge CPU %s\n", ms(f.turnCPU))
		return nil
	}
	fmt.Fprintf(out, "  per trivial turn: Forge CPU %s; PostgreSQL %.1f round trips, %.2f transactions (xact_commit, reads included), %s, CPU %s; Redis %.1f round trips, %.1f commands (those run inside scripts included), %s, CPU %s\n",
		ms(f.turnCPU), float64(d.pgTrips)/k, f.turnCommits, bytesOf(float64(d.pgBytes)/k), ms(f.turnPGCPU),
		float64(d.redisTrips)/k, float64(d.redisCalls)/k, bytesOf(float64(d.redisBytes)/k), ms(f.turnRedisCPU))
	if n > 1 {
		return u.switching(ctx, f, out)
	}
	return nil
}

// timeTurns runs turns trivial turns one after another, turn i on the
// target and session on gives it, and returns their latencies (sorted)
// and what every counter moved meanwhile.
func (u *unit) timeTurns(ctx context.Context, turns int, on func(i int) (*target, string)) ([]time.Duration, resUse, error) {
	before, err := u.used(ctx, true)
	if err != nil {
		return nil, resUse{}, err
	}
	body := turnBody("hi", false)
	lat := make([]time.Duration, 0, turns)
	for i := range turns {
		t, sid := on(i)
		d, err := t.waitTurn(ctx, sid, body)
		if err != nil {
			return nil, resUse{}, err
		}
		lat = append(lat, d)
	}
	after, err := u.used(ctx, true)
	if err != nil {
		return nil, resUse{}, err
	}
	slices.Sort(lat)
	return lat, after.sub(before), nil
}

// switching times trivial turns of one session, each on the next replica
// (what a load balancer without session affinity does): every turn
// begins on a replica that did not write the session last.
func (u *unit) switching(ctx context.Context, f *distFigures, out io.Writer) error {
	n := len(u.targets)
	_, ids, err := u.sessions(ctx, "gpt-test", 1)
	if err != nil {
		return err
	}
	body := turnBody("hi", false)
	for i := range 2 * n { // warm: each replica has prepared its statements
		if _, err := u.targets[i%n].waitTurn(ctx, ids[0], body); err != nil {
			return err
		}
	}
	turns := max(1, u.c.trivialTurns/2)
	lat, d, err := u.timeTurns(ctx, turns, func(i int) (*target, string) { return u.targets[i%n], ids[0] })
	if err != nil {
		return err
	}
	k := float64(turns)
	f.switchP50, f.switchPGTrips, f.switchCommits = percentile(lat, 0.5), float64(d.pgTrips)/k, float64(d.commits)/k
	fmt.Fprintf(out, "trivial turn on the next replica each time (one session, no affinity, %d turns)  p50 %s  p99 %s\n", turns,
		ms(f.switchP50), ms(percentile(lat, 0.99)))
	fmt.Fprintf(out, "  per turn: Forge CPU %s; PostgreSQL %.1f round trips, %.2f transactions, %s; Redis %.1f round trips\n",
		ms(d.cpu/time.Duration(turns)), f.switchPGTrips, f.switchCommits, bytesOf(float64(d.pgBytes)/k), float64(d.redisTrips)/k)
	return nil
}

func (u *unit) paced(ctx context.Context, f *distFigures, out io.Writer) error {
	n := len(u.targets)
	model := pacedModel(u.c.deltas, u.c.pace)
	_, ids, err := u.sessions(ctx, model, u.c.streams)
	if err != nil {
		return err
	}
	// One stream per replica first, so that nothing measured is a first.
	for i := range n {
		if _, err := u.targets[i].streamTurn(ctx, ids[i], time.Minute); err != nil {
			return err
		}
	}
	before, err := u.used(ctx, true)
	if err != nil {
		return err
	}
	totals := make([]time.Duration, len(ids))
	firsts, tails := make([]time.Duration, len(ids)), make([]time.Duration, len(ids))
	errs := make([]error, len(ids))
	got := make([]int, len(ids))
	var wg sync.WaitGroup
	var reply strings.Builder
	for i := range u.c.deltas {
		reply.WriteString(pacedPiece(i))
	}
	want := reply.String()
	var profiling sync.WaitGroup
	profiled := u.profile(ctx, &profiling, time.Duration(u.c.deltas)*u.c.pace)
	start := time.Now()
	for i, sid := range ids {
		wg.Go(func() {
			r, err := u.targets[i%n].streamTurn(ctx, sid, 10*time.Minute)
			totals[i], errs[i], got[i] = r.total, err, r.deltas
			firsts[i], tails[i] = r.ttfd, r.total-r.ttfd-r.span
			if err == nil && r.text.String() != want {
				errs[i] = fmt.Errorf("session %s: the deltas' text is not the model's: %d bytes of %d in %d deltas", sid, r.text.Len(), len(want), r.deltas)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	profiling.Wait()
	if err := errors.Join(append(errs, profiled...)...); err != nil {
		return err
	}
	after, err := u.used(ctx, true)
	if err != nil {
		return err
	}
	d := after.sub(before)
	// Each stream carried the model's text whole and in order; a server
	// short of CPU may carry it in fewer deltas (the engine joins the
	// deltas it withholds while checkpoints lag). The figures are per
	// delta the model sent.
	frames := 0
	for _, g := range got {
		frames += g
	}
	deltas := len(ids) * u.c.deltas
	if frames != deltas {
		fmt.Fprintf(out, "note: the streams carried the model's %d deltas in %d (text whole and in order: the server joined deltas it withheld while its checkpoints lagged)\n", deltas, frames)
	}
	s := time.Duration(len(ids))
	net := func(total, perTurn time.Duration) time.Duration {
		return max(0, total-s*perTurn) / time.Duration(deltas)
	}
	f.deltaCPU = net(d.cpu, f.turnCPU)
	f.deltaRedisCPU = net(d.redisCPU, f.turnRedisCPU)
	f.deltaPGCPU = net(d.pgCPU, f.turnPGCPU)
	f.streamCommits = float64(d.commits) / float64(len(ids))
	f.streamDur = time.Duration(u.c.deltas) * u.c.pace
	slices.Sort(totals)
	k := float64(deltas)
	f.streamP50, f.streamP99, f.deltaRedisTrips = percentile(totals, 0.5), percentile(totals, 0.99), float64(d.redisTrips)/k
	fmt.Fprintf(out, "a %.2g s stream (%d deltas %s apart) at %d concurrent streams takes %.2f s (p50; p99 %.2f s; all %d in %.2f s)\n",
		f.streamDur.Seconds(), u.c.deltas, u.c.pace, len(ids), percentile(totals, 0.5).Seconds(), percentile(totals, 0.99).Seconds(), len(ids), wall.Seconds())
	// Where a stream's time past the model's goes: before its first delta
	// (the turn's start), or after its last (the turn's end).
	slices.Sort(firsts)
	slices.Sort(tails)
	fmt.Fprintf(out, "  first delta after %s (p50; p99 %s), last delta to turn.done %s (p50; p99 %s)\n",
		ms(percentile(firsts, 0.5)), ms(percentile(firsts, 0.99)), ms(percentile(tails, 0.5)), ms(percentile(tails, 0.99)))
	if u.single {
		fmt.Fprintf(out, "  per delta (net of a trivial turn): Forge CPU %s\n", us(f.deltaCPU))
		return nil
	}
	fmt.Fprintf(out, "  per delta (net of a trivial turn): replica CPU %s, Redis CPU %s, PostgreSQL CPU %s; Redis %.2f round trips, %.2f commands, %s; per streamed turn %.1f transactions\n",
		us(f.deltaCPU), us(f.deltaRedisCPU), us(f.deltaPGCPU), float64(d.redisTrips)/k, float64(d.redisCalls)/k, bytesOf(float64(d.redisBytes)/k), f.streamCommits)
	return nil
}

// profile fetches, when --cpu-profiles is set, each replica's CPU profile
// for the next d (whole seconds, at least one) into that directory, on
// goroutines wg waits for; the errors are filled in by then.
func (u *unit) profile(ctx context.Context, wg *sync.WaitGroup, d time.Duration) []error {
	if u.c.cpuProfiles == "" {
		return nil
	}
	secs := max(1, int(d/time.Second))
	errs := make([]error, len(u.reps))
	for i, r := range u.reps {
		wg.Go(func() {
			errs[i] = func() error {
				addr := r.pprofAddr()
				if addr == "" {
					return fmt.Errorf("replica %d prints no pprof address", i)
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
				if err != nil {
					return err
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return fmt.Errorf("profiling replica %d: %w", i, err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("profiling replica %d: %s", i, resp.Status)
				}
				f, err := os.Create(filepath.Join(u.c.cpuProfiles, fmt.Sprintf("replicas-%d-%d.pprof", len(u.reps), i)))
				if err != nil {
					return err
				}
				if _, err := io.Copy(f, resp.Body); err != nil {
					f.Close()
					return err
				}
				return f.Close()
			}()
		})
	}
	return errs
}

func (u *unit) throughput(ctx context.Context, f *distFigures, out io.Writer) error {
	n := len(u.targets)
	_, ids, err := u.sessions(ctx, "gpt-test", u.c.tputSessions)
	if err != nil {
		return err
	}
	body := turnBody("hi", false)
	var done atomic.Int64
	errs := make([]error, len(ids))
	tctx, cancel := context.WithTimeout(ctx, u.c.tputDuration)
	defer cancel()
	before, err := u.used(ctx, false)
	if err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i, sid := range ids {
		wg.Go(func() {
			for tctx.Err() == nil {
				if _, err := u.targets[i%n].waitTurn(tctx, sid, body); err != nil {
					if tctx.Err() == nil {
						errs[i] = err
					}
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	after, err := u.used(ctx, false)
	if err != nil {
		return err
	}
	d := after.sub(before)
	rate := float64(done.Load()) / elapsed.Seconds()
	f.throughput = rate
	if u.single {
		fmt.Fprintf(out, "throughput at %d sessions: %.0f trivial turns/s (%d in %.1f s; Forge CPU %.0f%% of a core)\n",
			len(ids), rate, done.Load(), elapsed.Seconds(), 100*d.cpu.Seconds()/elapsed.Seconds())
		return nil
	}
	fmt.Fprintf(out, "throughput at %d sessions: %.0f trivial turns/s (%d in %.1f s; replicas' CPU %.0f%% of a core, Redis %.0f%%, PostgreSQL %.0f%%)\n",
		len(ids), rate, done.Load(), elapsed.Seconds(), 100*d.cpu.Seconds()/elapsed.Seconds(), 100*d.redisCPU.Seconds()/elapsed.Seconds(),
		100*d.pgCPU.Seconds()/elapsed.Seconds())
	return nil
}

// printPaperModel scales each unit's figures to 10,000 concurrent
// streaming turns of 20 s and 1,000 deltas each.
func printPaperModel(out io.Writer, units []distFigures) {
	const turns, secs, deltas = 10_000, 20.0, 1_000
	turnRate := turns / secs           // turns starting (and ending) per second
	deltaRate := turns * deltas / secs // deltas per second
	fmt.Fprintf(out, "\n== paper model: %d concurrent streaming turns, %.0f s and %d deltas each (%.0f turns/s, %.0f deltas/s)\n",
		turns, secs, deltas, turnRate, deltaRate)
	for _, f := range units {
		if f.replicas == 0 {
			fmt.Fprintf(out, "a single node would need %.1f cores (were there such a machine: for the comparison)\n",
				turnRate*f.turnCPU.Seconds()+deltaRate*f.deltaCPU.Seconds())
			continue
		}
		replicaCores := turnRate*f.turnCPU.Seconds() + deltaRate*f.deltaCPU.Seconds()
		redisCores := turnRate*f.turnRedisCPU.Seconds() + deltaRate*f.deltaRedisCPU.Seconds()
		pgCores := turnRate*f.turnPGCPU.Seconds() + deltaRate*f.deltaPGCPU.Seconds()
		// The measured streamed turn's transactions, plus one checkpoint
		// per further second of streaming (the engine's default interval).
		commits := f.streamCommits + max(0, secs-f.streamDur.Seconds())
		fmt.Fprintf(out, "from %s: replicas %.1f cores, Redis %.1f cores (one server per core: Redis runs one command at a time), PostgreSQL %.1f cores, ~%.0f transactions/s\n",
			plural(f.replicas, "replica"), replicaCores, redisCores, pgCores, turnRate*commits)
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond)) }

func bytesOf(b float64) string {
	if b >= 10*1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f B", b)
}
