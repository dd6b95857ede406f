package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// The real load: what a real `forge serve` costs when the model paces its
// deltas as real models do, when sessions grow long, when a session has
// many readers and many sessions stream at once; each figure printed
// beside its floor, measured in the same run, and their ratio. Every
// scenario runs on a fresh forge serve (a new database) with a fake model
// server in a process of its own: the instant model, whose model names
// paced-<N>x<D> answer N content deltas D apart in OpenAI's Chat
// Completions chunks (instant.go). The scenarios:
//
//   - paced: streamed turns of N deltas paced 2 ms and 20 ms, and the same
//     deltas in one burst: server CPU per delta and per turn (the floor:
//     the burst), store writes per turn (the floor: a trivial turn's writes,
//     the boundaries, plus one checkpoint per second of streaming), the
//     time to the first delta and the whole stream (the floor: the model
//     alone, the same request made raw from here).
//   - concurrent: 1, 10, 100 sessions streaming at once: CPU per delta,
//     writes per turn, the streams' duration against the model's own for as
//     many raw streams at once.
//   - subscribers: 1 and 100 SSE readers of one session's events: server
//     CPU per delivered delta and the last reader's first delta, against a
//     bare Go broadcaster (broadcast.go) sending the same frames.
//   - long: sessions of 10 and 10,000 messages: a trivial turn's time and
//     CPU at each (the floor: the shortest session), and listing all the
//     messages page by page against reading their rows from the SQLite
//     file directly.
//   - rss: the server's RSS after N turns over M sessions against its RSS
//     at start plus the growth of the Go heap's live set.
//   - disk: the database's growth per trivial turn against the text the
//     turn adds, and the JSON the API returns for its messages.

var realloadScenarios = []string{"paced", "concurrent", "subscribers", "long", "rss", "disk"}

type realloadConfig struct {
	scenarios       []string
	deltas          int
	paces           []time.Duration
	turns           int
	burstTurns      int
	trivialTurns    int
	streams         []int
	concurrentPace  time.Duration
	subscribers     []int
	subscriberPace  time.Duration
	subscriberTurns int
	messages        []int
	longTurns       int
	buildTimeout    time.Duration
	rssTurns        int
	rssSessions     int
	diskTurns       int
	diskSessions    int
	repeat          int
	timeout         time.Duration
	forgeBin        string
	serveArgs       []string
}

// maxConns is the most connections a scenario holds open at once.
func (c *realloadConfig) maxConns() int {
	return max(slices.Max(c.streams), slices.Max(c.subscribers), c.rssSessions, c.diskSessions) + 8
}

func runRealload(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("realload", flag.ContinueOnError)
	c := realloadConfig{}
	scenarios := fs.String("scenarios", strings.Join(realloadScenarios, ","), "the scenarios to run, comma-separated: "+strings.Join(realloadScenarios, ", "))
	fs.IntVar(&c.deltas, "deltas", 500, "content deltas per streamed reply (1..100000)")
	paces := durationList{2 * time.Millisecond, 20 * time.Millisecond}
	fs.Var(&paces, "pace", "paced scenario: the model's pauses between deltas, comma-separated (each 1ms..1s)")
	fs.IntVar(&c.turns, "turns", 2, "paced scenario: streamed turns per pacing, each on a new session (1..1000)")
	fs.IntVar(&c.burstTurns, "burst-turns", 30, "paced and concurrent scenarios: turns whose deltas come in one burst, the CPU floor (1..10000; CPU is counted in 10 ms ticks)")
	fs.IntVar(&c.trivialTurns, "trivial-turns", 20, "paced and concurrent scenarios: trivial turns counted for the floor of writes per turn (1..10000)")
	streams := intList{1, 10, 100}
	fs.Var(&streams, "streams", "concurrent scenario: sessions streaming at once, comma-separated (each 1..1000)")
	fs.DurationVar(&c.concurrentPace, "concurrent-pace", 20*time.Millisecond, "concurrent scenario: the pause between deltas (0..1s)")
	subscribers := intList{1, 100}
	fs.Var(&subscribers, "subscribers", "subscribers scenario: SSE readers of one session, comma-separated (each 1..1000)")
	fs.DurationVar(&c.subscriberPace, "subscriber-pace", 0, "subscribers scenario: the pause between deltas (0: one burst; up to 1s)")
	fs.IntVar(&c.subscriberTurns, "subscriber-turns", 10, "subscribers scenario: turns per number of readers (1..1000)")
	messages := intList{10, 10_000}
	fs.Var(&messages, "messages", "long scenario: session lengths in messages, comma-separated, ascending (each even, 2..100000; a trivial turn adds 2)")
	fs.IntVar(&c.longTurns, "long-turns", 100, "long scenario: trivial turns timed at each length (1..1000)")
	fs.DurationVar(&c.buildTimeout, "build-timeout", 5*time.Minute, "long scenario: longest the building of the sessions of one length may take (up to 1h)")
	fs.IntVar(&c.rssTurns, "rss-turns", 10_000, "rss scenario: trivial turns in all (1..1000000)")
	fs.IntVar(&c.rssSessions, "rss-sessions", 100, "rss scenario: sessions they are spread over, one client each (1..1000)")
	fs.IntVar(&c.diskTurns, "disk-turns", 1000, "disk scenario: trivial turns in all (1..1000000)")
	fs.IntVar(&c.diskSessions, "disk-sessions", 10, "disk scenario: sessions they are spread over, one client each (1..1000)")
	fs.IntVar(&c.repeat, "repeat", 1, "runs of each scenario, each on a fresh server; with more than one the table shows the range (1..100)")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Minute, "longest one run of a scenario may take (up to 6h)")
	doSpawn := fs.Bool("spawn", true, "start a forge serve for each run (a fresh database in a temporary directory) and a fake model server in a process of its own; the only way this mode runs (its floors need the server's pid, database file and profiling port, and the fake's process)")
	fs.StringVar(&c.forgeBin, "forge-bin", "", "the forge binary to run (default: forge next to forge-load, else on $PATH)")
	var serveArgs stringList
	fs.Var(&serveArgs, "serve-arg", "a flag for the spawned forge serve (repeatable)")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	c.paces, c.streams, c.subscribers, c.messages, c.serveArgs = paces, streams, subscribers, messages, serveArgs
	for s := range strings.SplitSeq(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(realloadScenarios, s) {
			return fmt.Errorf("--scenarios: unknown scenario %q (want some of %s)", s, strings.Join(realloadScenarios, ", "))
		}
		if !slices.Contains(c.scenarios, s) {
			c.scenarios = append(c.scenarios, s)
		}
	}
	if err := c.check(*doSpawn); err != nil {
		return err
	}
	bin, err := findForge(c.forgeBin)
	if err != nil {
		return err
	}
	c.forgeBin = bin
	fmt.Fprintf(out, "forge-load realload: %s, a fresh forge serve and fake model process per run; scenarios %s; %d CPUs, load average %s\n",
		bin, strings.Join(c.scenarios, ","), runtime.NumCPU(), loadAverage())
	for _, name := range c.scenarios {
		if err := runScenario(ctx, name, &c, out); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (c *realloadConfig) check(doSpawn bool) error {
	inRange := func(v []int, lo, hi int) bool {
		return len(v) > 0 && !slices.ContainsFunc(v, func(n int) bool { return n < lo || n > hi })
	}
	switch {
	case !doSpawn:
		return errors.New("realload runs only with --spawn: its floors need the server's pid, its database file and profiling port, and the fake model's process")
	case c.deltas < 1 || c.deltas > 100_000:
		return errors.New("--deltas must be 1..100000")
	case len(c.paces) == 0 || slices.ContainsFunc(c.paces, func(d time.Duration) bool { return d < time.Millisecond || d > time.Second }):
		return errors.New("--pace must list pauses of 1ms..1s")
	case c.turns < 1 || c.turns > 1000:
		return errors.New("--turns must be 1..1000")
	case c.burstTurns < 1 || c.burstTurns > 10_000:
		return errors.New("--burst-turns must be 1..10000")
	case c.trivialTurns < 1 || c.trivialTurns > 10_000:
		return errors.New("--trivial-turns must be 1..10000")
	case !inRange(c.streams, 1, 1000):
		return errors.New("--streams must list numbers 1..1000")
	case c.concurrentPace < 0 || c.concurrentPace > time.Second:
		return errors.New("--concurrent-pace must be 0..1s")
	case !inRange(c.subscribers, 1, 1000):
		return errors.New("--subscribers must list numbers 1..1000")
	case c.subscriberPace < 0 || c.subscriberPace > time.Second:
		return errors.New("--subscriber-pace must be 0..1s")
	case c.subscriberTurns < 1 || c.subscriberTurns > 1000:
		return errors.New("--subscriber-turns must be 1..1000")
	case !inRange(c.messages, 2, 100_000) || slices.ContainsFunc(c.messages, func(n int) bool { return n%2 != 0 }) || !slices.IsSorted(c.messages):
		return errors.New("--messages must list even lengths 2..100000, ascending")
	case c.longTurns < 1 || c.longTurns > 1000:
		return errors.New("--long-turns must be 1..1000")
	case c.buildTimeout <= 0 || c.buildTimeout > time.Hour:
		return errors.New("--build-timeout must be more than 0 and at most 1h")
	case c.rssTurns < 1 || c.rssTurns > 1_000_000:
		return errors.New("--rss-turns must be 1..1000000")
	case c.rssSessions < 1 || c.rssSessions > 1000:
		return errors.New("--rss-sessions must be 1..1000")
	case c.diskTurns < 1 || c.diskTurns > 1_000_000:
		return errors.New("--disk-turns must be 1..1000000")
	case c.diskSessions < 1 || c.diskSessions > 1000:
		return errors.New("--disk-sessions must be 1..1000")
	case c.repeat < 1 || c.repeat > 100:
		return errors.New("--repeat must be 1..100")
	case c.timeout <= 0 || c.timeout > 6*time.Hour:
		return errors.New("--timeout must be more than 0 and at most 6h")
	}
	return nil
}

// scenario is one of realload's scenarios: it measures on a fresh env and
// returns its figures, the same labels in the same order on every run.
type scenario struct {
	describe func(c *realloadConfig) string
	run      func(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error)
}

var scenarioTable = map[string]scenario{
	"paced":       {describePaced, runPaced},
	"concurrent":  {describeConcurrent, runConcurrent},
	"subscribers": {describeSubscribers, runSubscribers},
	"long":        {describeLong, runLong},
	"rss":         {describeRSS, runRSS},
	"disk":        {describeDisk, runDisk},
}

func runScenario(ctx context.Context, name string, c *realloadConfig, out io.Writer) error {
	sc := scenarioTable[name]
	fmt.Fprintf(out, "\n== %s: %s\n", name, sc.describe(c))
	var runs [][]figure
	for i := range c.repeat {
		if err := ctx.Err(); err != nil {
			return err
		}
		figs, err := runOnce(ctx, sc, c, i+1, out)
		if err != nil {
			return err
		}
		if len(runs) > 0 && !sameLabels(runs[0], figs) {
			return errors.New("a run returned other figures than the first (a bug of forge-load)")
		}
		runs = append(runs, figs)
	}
	printFigures(out, runs)
	return nil
}

func runOnce(ctx context.Context, sc scenario, c *realloadConfig, n int, out io.Writer) (figs []figure, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	load0 := loadAverage1()
	start := time.Now()
	e, err := startEnv(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := e.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	figs, err = sc.run(ctx, e, c)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (the run took more than --timeout %s)", err, c.timeout)
		}
		return nil, err
	}
	fmt.Fprintf(out, "run %-3d forge serve pid %d, %.1f s, load average (1 min) %s → %s\n", n, e.sp.pid, time.Since(start).Seconds(), load0, loadAverage1())
	return figs, nil
}

// rlEnv is a fresh forge serve and its fake model process, for one run of
// a scenario.
type rlEnv struct {
	sp    *spawned
	fake  *remoteFake
	t     *target
	pprof string       // host:port of the server's net/http/pprof
	hc    *http.Client // raw requests to the model server (the floors)
}

func startEnv(ctx context.Context, c *realloadConfig) (*rlEnv, error) {
	extra := append([]string{"--pprof-addr=127.0.0.1:0"}, c.serveArgs...)
	sp, err := spawn(ctx, c.forgeBin, "instant", false, extra)
	if err != nil {
		return nil, err
	}
	e := &rlEnv{sp: sp, hc: floorClient()}
	e.hc.Transport.(*http.Transport).MaxIdleConnsPerHost = c.maxConns()
	fake, ok := sp.model.(*remoteFake)
	if !ok {
		_ = e.stop()
		return nil, errors.New("the fake model server does not run in a process of its own")
	}
	e.fake = fake
	sp.model.RecordRequests(false)
	e.pprof = sp.pprofAddr()
	cm := common{server: sp.url}
	if e.t, err = cm.connect(ctx, c.maxConns()); err != nil {
		_ = e.stop()
		return nil, err
	}
	return e, nil
}

func (e *rlEnv) stop() error {
	if e.t != nil {
		e.t.close()
	}
	e.hc.CloseIdleConnections()
	return e.sp.stop()
}

// serverUse is what the server has used so far: CPU time and store writes.
type serverUse struct {
	cpu    time.Duration
	writes float64
}

func (u serverUse) sub(v serverUse) serverUse {
	return serverUse{cpu: u.cpu - v.cpu, writes: u.writes - v.writes}
}

func (e *rlEnv) used(ctx context.Context) (serverUse, error) {
	cpu, err := cpuTime(e.sp.pid)
	if err != nil {
		return serverUse{}, err
	}
	w, err := e.storeWrites(ctx)
	if err != nil {
		return serverUse{}, err
	}
	return serverUse{cpu: cpu, writes: w}, nil
}

// storeWrites reads forge_store_write_duration_seconds_count, the store's
// write transactions so far, from /metrics.
func (e *rlEnv) storeWrites(ctx context.Context) (float64, error) {
	body, err := e.get(ctx, e.t.base+"/metrics")
	if err != nil {
		return 0, err
	}
	const name = "forge_store_write_duration_seconds_count "
	for l := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(l, name); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("/metrics has no forge_store_write_duration_seconds_count (is --metrics off?)")
}

// heapLive forces a GC in the server and returns its Go heap in use after
// it (HeapAlloc, from the pprof heap endpoint): the live set.
func (e *rlEnv) heapLive(ctx context.Context) (int64, error) {
	if e.pprof == "" {
		return 0, errors.New("the server prints no pprof address")
	}
	body, err := e.get(ctx, "http://"+e.pprof+"/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("the heap profile has no HeapAlloc line")
}

func (e *rlEnv) get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, apiError(resp)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// agent creates an agent on model ("openai/paced-500x2ms", "scripted/echo").
func (e *rlEnv) agent(ctx context.Context, model string) (string, error) {
	return e.t.createAgentOn(ctx, &forge.Agent{Instructions: "be brief", Model: model})
}

// rawStream makes the model request of a turn raw, from this process, and
// returns the time to its first content chunk and to its end, and the
// content chunks it counted.
func (e *rlEnv) rawStream(ctx context.Context, model string) (ttfc, total time.Duration, deltas int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.sp.modelURL+"/chat/completions", bytes.NewReader(floorBody(model)))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+spawnKey)
	start := time.Now()
	resp, err := e.hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, apiError(resp)
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, 0, 0, fmt.Errorf("the model stream ended before [DONE]: %w", err)
		}
		if bytes.Contains(line, []byte(`"delta":{"content":`)) {
			if deltas == 0 {
				ttfc = time.Since(start)
			}
			deltas++
		}
		if bytes.HasPrefix(line, []byte("data: [DONE]")) {
			return ttfc, time.Since(start), deltas, nil
		}
	}
}

// figure is one line of a scenario's table.
type figure struct {
	label    string
	kind     valueKind
	measured float64
	floor    float64 // NaN: none
	floorIs  string
}

type valueKind int

const (
	kindDuration valueKind = iota // nanoseconds
	kindCount
	kindBytes
)

func durFigure(label string, measured, floor time.Duration, floorIs string) figure {
	return figure{label: label, kind: kindDuration, measured: float64(measured), floor: float64(floor), floorIs: floorIs}
}

func format(k valueKind, v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	switch k {
	case kindDuration:
		switch a := math.Abs(v); {
		case a < 1e6:
			return sig3(v/1e3) + " µs"
		case a < 1e9:
			return sig3(v/1e6) + " ms"
		default:
			return sig3(v/1e9) + " s"
		}
	case kindBytes:
		switch a := math.Abs(v); {
		case a < 1<<10:
			return fmt.Sprintf("%.0f B", v)
		case a < 1<<20:
			return sig3(v/(1<<10)) + " KiB"
		default:
			return sig3(v/(1<<20)) + " MiB"
		}
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return sig3(v)
}

// sig3 formats v with three significant digits, or as a whole number
// when it has more before the point.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(m, f float64) float64 {
	if math.IsNaN(f) || f == 0 || math.IsNaN(m) {
		return math.NaN()
	}
	return m / f
}

func sameLabels(a, b []figure) bool {
	return slices.EqualFunc(a, b, func(x, y figure) bool { return x.label == y.label })
}

// printFigures prints the table of a scenario's runs: each figure's value
// (with several runs, the range of its values), its floor, and the ratio.
func printFigures(out io.Writer, runs [][]figure) {
	if len(runs) == 0 {
		return
	}
	rows := [][]string{{"figure", "measured", "floor", "ratio", "floor is"}}
	for i, f := range runs[0] {
		var ms, fs, rs []float64
		for _, r := range runs {
			ms, fs = append(ms, r[i].measured), append(fs, r[i].floor)
			rs = append(rs, ratio(r[i].measured, r[i].floor))
		}
		rows = append(rows, []string{f.label, spread(f.kind, ms), spread(f.kind, fs), ratioSpread(rs), f.floorIs})
	}
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for c, cell := range r {
			width[c] = max(width[c], len([]rune(cell)))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString(" ")
		for c, cell := range r {
			b.WriteString(" ")
			b.WriteString(cell)
			if c < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[c]-len([]rune(cell))+1))
			}
		}
		fmt.Fprintln(out, b.String())
	}
}

func spread(k valueKind, v []float64) string {
	lo, hi := minMax(v)
	if a, b := format(k, lo), format(k, hi); a != b {
		return a + " – " + b
	}
	return format(k, lo)
}

func ratioSpread(v []float64) string {
	lo, hi := minMax(v)
	if math.IsNaN(lo) {
		return "—"
	}
	if a, b := sig3(lo), sig3(hi); a != b {
		return a + "–" + b + "×"
	}
	return sig3(lo) + "×"
}

// minMax returns the least and greatest of v, NaN if any is NaN.
func minMax(v []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		if math.IsNaN(x) {
			return math.NaN(), math.NaN()
		}
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func median(d []time.Duration) time.Duration {
	return percentile(slices.Sorted(slices.Values(d)), 0.5)
}

// loadAverage is /proc/loadavg's three averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func loadAverage1() string {
	a, _, _ := strings.Cut(loadAverage(), " ")
	return a
}

// durationList is a comma-separated list of durations.
type durationList []time.Duration

func (l durationList) String() string {
	var s []string
	for _, d := range l {
		s = append(s, d.String())
	}
	return strings.Join(s, ",")
}

func (l *durationList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*l = append(*l, d)
	}
	return nil
}

// intList is a comma-separated list of integers.
type intList []int

func (l intList) String() string {
	var s []string
	for _, n := range l {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.ReplaceAll(f, "_", "")))
		if err != nil {
			return err
		}
		*l = append(*l, n)
	}
	return nil
}

// plural is "1 stream", "10 streams".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
