package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
	"github.com/forge-runtime/forge/redis/redistest"
)

// Benchmarks of distributed mode against real forge serve processes (the
// model: openaitest on loopback, answering at once). Figures and how they
// were taken: docs/benchmarks.md.
//
//	go test -run '^$' -bench 'TrivialTurnStores|ReplicaThroughput|ResumeAcrossReplicas' -benchtime 2000x ./e2e/

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(d)
	if len(d) == 0 {
		return 0, 0
	}
	return d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
}

// dbXacts reads the database's transactions (PostgreSQL's own count;
// idle backends flush it within a second or so, hence the wait).
func dbXacts(b *testing.B, db string) int64 {
	b.Helper()
	time.Sleep(2 * time.Second)
	c, err := pgx.Connect(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int64
	if err := c.QueryRow(context.Background(), `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// redisCalls returns how many times the test Redis ran a command: calls
// counts every command, those scripts run included; scripts counts the
// script calls (EVALSHA, EVAL), which are the round trips of publishing.
func redisCalls(b *testing.B) (calls, scripts int64) {
	b.Helper()
	info, err := redistest.Client(b).Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		var n int64
		fmt.Sscan(strings.SplitN(rest, ",", 2)[0], &n)
		calls += n
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			scripts += n
		}
	}
	return calls, scripts
}

// BenchmarkTrivialTurnStores: wait-mode turns one after another (a new
// session every 10) against one forge serve on SQLite, on PostgreSQL, and
// on PostgreSQL with Redis (distributed mode, one replica): p50/p99 from
// request to answer, and the database transactions and Redis commands per
// turn.
func BenchmarkTrivialTurnStores(b *testing.B) {
	for _, mode := range []string{"sqlite", "postgres", "postgres+redis"} {
		b.Run("store="+mode, func(b *testing.B) {
			model := openaitest.New(b)
			model.SetDefault(openaitest.Text("ok"))
			db := b.TempDir() + "/forge.db"
			var args []string
			if mode != "sqlite" {
				db = pgtest.NewDatabase(b)
				args = []string{"--sandbox-root", b.TempDir()}
			}
			if mode == "postgres+redis" {
				args = replicaArgs(b, db)
			}
			s := start(b, db, model, args...)
			s.agent(obj{"name": "a", "model": "openai/gpt-test"})
			sid := ""
			for i := range 30 { // warm up connections and statement caches
				if i%10 == 0 {
					sid = s.session("a")
				}
				s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("hi"))
			}
			var lat []time.Duration
			var xacts, calls, scripts int64
			if mode != "sqlite" {
				xacts = dbXacts(b, db)
			}
			if mode == "postgres+redis" {
				calls, scripts = redisCalls(b)
			}
			i := 0
			for b.Loop() {
				if i%10 == 0 {
					b.StopTimer()
					sid = s.session("a")
					b.StartTimer()
				}
				i++
				t0 := time.Now()
				s.must(200, "POST", "/v1/sessions/"+sid+"/turns", message("hi"))
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			if mode != "sqlite" {
				// The session creations (one per 10 turns) are in the
				// count: one transaction each.
				sessions := int64((i + 9) / 10)
				b.ReportMetric(float64(dbXacts(b, db)-xacts-sessions)/float64(i), "db-xacts/turn")
			}
			if mode == "postgres+redis" {
				c, sc := redisCalls(b)
				b.ReportMetric(float64(sc-scripts)/float64(i), "redis-scripts/turn")
				b.ReportMetric(float64(c-calls)/float64(i), "redis-cmds/turn")
			}
		})
	}
}

// BenchmarkReplicaThroughput: 24 clients, one session each, run wait-mode
// turns back to back, spread over one or three replicas (PostgreSQL +
// Redis) on this machine: turns/s and latency.
func BenchmarkReplicaThroughput(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			model := openaitest.New(b)
			model.SetDefault(openaitest.Text("ok"))
			_, rs := cluster(b, n, model)
			rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
			const clients = 24
			sids := make([]string, clients)
			for i := range sids {
				sids[i] = rs[i%n].session("a")
				rs[i%n].must(200, "POST", "/v1/sessions/"+sids[i]+"/turns", message("warm"))
			}
			work := make(chan int)
			var mu sync.Mutex
			var lat []time.Duration
			var wg sync.WaitGroup
			b.ResetTimer()
			began := time.Now()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := c
					for range work {
						r := rs[k%n]
						k++
						t0 := time.Now()
						r.must(200, "POST", "/v1/sessions/"+sids[c]+"/turns", message("hi"))
						d := time.Since(t0)
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}
				}()
			}
			turns := 0
			for b.Loop() {
				work <- turns
				turns++
			}
			close(work)
			wg.Wait()
			elapsed := time.Since(began)
			b.StopTimer()
			p50, p99 := percentiles(lat)
			b.ReportMetric(float64(turns)/elapsed.Seconds(), "turns/s")
			b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkResumeAcrossReplicas: a client streaming a turn from one
// replica drops its connection and resumes after its last seq on another
// replica: the time from sending the resume request to receiving its
// first event (a delta the turn's owner published while the client was
// away, read from Redis).
func BenchmarkResumeAcrossReplicas(b *testing.B) {
	model := openaitest.New(b)
	_, rs := cluster(b, 2, model)
	rs[0].agent(obj{"name": "a", "model": "openai/gpt-test"})
	pieces := make([]string, 2000)
	for i := range pieces {
		pieces[i] = "x"
	}
	var lat []time.Duration
	sid := ""
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if i%10 == 0 {
			sid = rs[0].session("a")
		}
		model.Enqueue(openaitest.Text(pieces...).DelayBetweenChunks(2 * time.Millisecond))
		ch, cancel := rs[0].stream("POST", "/v1/sessions/"+sid+"/turns", obj{"input": []obj{{"type": "message", "text": "go"}}, "stream": true})
		seen := until(b, ch, func(evs []event) bool { return len(deltaText(evs)) >= 3 })
		cancel()
		tid := seen[0].Data["id"].(string)
		last := seen[len(seen)-1].ID
		time.Sleep(20 * time.Millisecond) // the turn goes on without the client
		b.StartTimer()
		d := firstEventAfter(b, rs[1].URL+"/v1/sessions/"+sid+"/turns/"+tid+"/events", last)
		b.StopTimer()
		lat = append(lat, d)
		rs[1].must(200, "POST", "/v1/sessions/"+sid+"/cancel", nil)
		b.StartTimer()
	}
	p50, p99 := percentiles(lat)
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
}

// firstEventAfter resumes a stream after seq and returns how long its
// first event took to arrive.
func firstEventAfter(b *testing.B, url string, seq int64) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", fmt.Sprint(seq))
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasPrefix(line, "id: ") {
			return time.Since(t0)
		}
	}
}
