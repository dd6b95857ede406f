package main

// What a unit's replicas, PostgreSQL and Redis have used at a moment, and
// what moved between two moments: the counters every figure of forge-load
// distributed is made of.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
)

// resUse is what the replicas, PostgreSQL and Redis had done at a moment.
type resUse struct {
	cpu        time.Duration // the replicas'
	commits    int64
	pgTrips    int64
	pgBytes    int64
	redisTrips int64
	redisBytes int64
	redisCalls int64
	redisCPU   time.Duration
	// pgProcs is the CPU each PostgreSQL server process had used (those
	// pg_stat_activity lists: backends and background workers); pgCPU is
	// set by sub.
	pgProcs map[int]time.Duration
	pgCPU   time.Duration
}

// sub is what moved from v to u. PostgreSQL's CPU counts the processes
// alive at u, from v or from their start: one that exited in between is
// missed (the replicas' pooled connections live as long as the unit).
func (u resUse) sub(v resUse) resUse {
	d := resUse{cpu: u.cpu - v.cpu, commits: u.commits - v.commits, pgTrips: u.pgTrips - v.pgTrips, pgBytes: u.pgBytes - v.pgBytes,
		redisTrips: u.redisTrips - v.redisTrips, redisBytes: u.redisBytes - v.redisBytes, redisCalls: u.redisCalls - v.redisCalls,
		redisCPU: u.redisCPU - v.redisCPU}
	for pid, cpu := range u.pgProcs {
		d.pgCPU += cpu - v.pgProcs[pid]
	}
	return d
}

// used reads every counter. PostgreSQL's statistics reach pg_stat_database
// from idle backends within a second or so: settle waits that long first.
func (u *unit) used(ctx context.Context, settle bool) (resUse, error) {
	var s resUse
	if settle {
		t := time.NewTimer(1500 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return s, ctx.Err()
		}
	}
	for _, r := range u.reps {
		cpu, err := cpuTime(r.pid)
		if err != nil {
			return s, err
		}
		s.cpu += cpu
	}
	if u.single {
		return s, nil
	}
	if _, err := u.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return s, err
	}
	if err := u.admin.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, u.db).Scan(&s.commits); err != nil {
		return s, fmt.Errorf("pg_stat_database: %w", err)
	}
	var err error
	if s.pgProcs, err = pgProcesses(ctx, u.admin); err != nil {
		return s, err
	}
	s.pgTrips, s.pgBytes = u.pgProxy.counts()
	for _, p := range u.rProxy {
		trips, bytes := p.counts()
		s.redisTrips += trips
		s.redisBytes += bytes
	}
	for _, rc := range u.rcs {
		calls, cpu, err := redisInfo(ctx, rc)
		if err != nil {
			return s, err
		}
		s.redisCalls += calls
		s.redisCPU += cpu
	}
	return s, nil
}

// pgProcesses reads the CPU used by each process of the PostgreSQL server
// (on this machine: the URL is loopback) from /proc. A process that ends
// between the query and the read is left out.
func pgProcesses(ctx context.Context, admin *pgx.Conn) (map[int]time.Duration, error) {
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	procs := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if cpu, err := cpuTime(int(pid)); err == nil {
			procs[int(pid)] = cpu
		}
	}
	return procs, nil
}

// redisInfo returns the commands a Redis server has run (INFO's own left
// out) and the CPU it has used (used_cpu_sys + used_cpu_user).
func redisInfo(ctx context.Context, rc *goredis.Client) (calls int64, cpu time.Duration, err error) {
	info, err := rc.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redis INFO: %w", err)
	}
	var secs float64
	for line := range strings.SplitSeq(info, "\r\n") {
		if name, rest, ok := strings.Cut(line, ":calls="); ok {
			if name == "cmdstat_info" {
				continue
			}
			n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			calls += n
			continue
		}
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				x, _ := strconv.ParseFloat(v, 64)
				secs += x
			}
		}
	}
	return calls, time.Duration(secs * float64(time.Second)), nil
}
