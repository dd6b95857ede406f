package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the floors read the server's database file directly
)

// The store scenarios: long, rss, disk. Their turns run on scripted/echo
// (in the server: no model call), so that building long sessions is quick
// and a turn's cost is the store's and the engine's.

// openReadOnly opens the server's database file read-only, beside the
// server (SQLite's WAL lets a reader in another process see every commit).
func openReadOnly(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening %s read-only: %w", path, err)
	}
	return db, nil
}

// turnsOver runs total wait-mode turns over sessions, a client per session
// running its share back to back.
func (e *rlEnv) turnsOver(ctx context.Context, sessions []string, total int) error {
	body := turnBody("hi", false)
	errs := make(chan error, len(sessions))
	var wg sync.WaitGroup
	for i, sid := range sessions {
		n := total / len(sessions)
		if i < total%len(sessions) {
			n++
		}
		wg.Go(func() {
			for range n {
				if _, err := e.t.waitTurn(ctx, sid, body); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// listMessages reads a session's messages through the API with the
// default page size, following next_cursor, and returns how many there
// were, the pages and the bytes of the answers.
func (e *rlEnv) listMessages(ctx context.Context, sid string) (msgs, pages int, size int64, err error) {
	cursor := ""
	for pages < 100_000 {
		path := "/v1/sessions/" + sid + "/messages"
		if cursor != "" {
			path += "?cursor=" + url.QueryEscape(cursor)
		}
		req, err := e.t.request(ctx, http.MethodGet, path, nil)
		if err != nil {
			return msgs, pages, size, err
		}
		resp, err := e.t.hc.Do(req)
		if err != nil {
			return msgs, pages, size, err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return msgs, pages, size, err
		}
		if resp.StatusCode != http.StatusOK {
			return msgs, pages, size, fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, b)
		}
		var page struct {
			Data       []json.RawMessage `json:"data"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return msgs, pages, size, fmt.Errorf("GET %s: %w", path, err)
		}
		pages++
		msgs += len(page.Data)
		size += int64(len(b))
		if page.NextCursor == nil || *page.NextCursor == "" {
			return msgs, pages, size, nil
		}
		cursor = *page.NextCursor
	}
	return msgs, pages, size, errors.New("more than 100,000 pages of messages")
}

// sqliteMessages reads every column of a session's messages and their
// parts from the database file, as the listing returns them (oldest
// first), and returns how many messages there were.
func sqliteMessages(ctx context.Context, db *sql.DB, sid string) (int, error) {
	var tenant string
	if err := db.QueryRowContext(ctx, `SELECT tenant FROM sessions WHERE id = ?`, sid).Scan(&tenant); err != nil {
		return 0, fmt.Errorf("reading session %s: %w", sid, err)
	}
	rows, err := db.QueryContext(ctx, `SELECT m.*, p.* FROM messages m LEFT JOIN parts p ON p.tenant = m.tenant AND p.message_id = m.id
		WHERE m.tenant = ? AND m.session_id = ? ORDER BY m.id, p.id`, tenant, sid)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	msgs, last := 0, ""
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		if id, _ := vals[1].(string); id != last {
			msgs, last = msgs+1, id
		}
	}
	return msgs, rows.Err()
}

// dbSize is the database's size, page_count * page_size: what the file
// holds after a full checkpoint (the log's pages included).
func dbSize(ctx context.Context, db *sql.DB) (int64, error) {
	var pages, size int64
	if err := db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		return 0, err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&size); err != nil {
		return 0, err
	}
	return pages * size, nil
}

// textBytes is the bytes of text in every part of the database: what the
// conversations hold.
func textBytes(ctx context.Context, db *sql.DB) (int64, error) {
	var n sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT SUM(length(CAST(text AS BLOB))) FROM parts`).Scan(&n)
	return n.Int64, err
}

func describeLong(c *realloadConfig) string {
	return fmt.Sprintf("sessions of %s messages built by trivial turns on scripted/echo, one by one; at each length: listing all messages of one (default pages), then %d timed trivial turns spread over enough sessions of that length that none grows by more than a tenth; floors: the shortest sessions, the same rows read from the SQLite file",
		intList(c.messages).String(), c.longTurns)
}

// longSessions is how many sessions of size messages the long scenario
// builds for turns timed turns, so that none grows by more than a tenth
// (a turn adds 2 messages).
func longSessions(size, turns int) int {
	perSession := max(1, size/20)
	return (turns + perSession - 1) / perSession
}

func runLong(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error) {
	agent, err := e.agent(ctx, "scripted/echo")
	if err != nil {
		return nil, err
	}
	db, err := openReadOnly(ctx, e.sp.db)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	body := turnBody("hi", false)
	var figs []figure
	var turn0, cpu0 time.Duration
	for i, size := range c.messages {
		ids, err := e.t.createSessions(ctx, agent, longSessions(size, c.longTurns))
		if err != nil {
			return nil, err
		}
		bctx, cancel := context.WithTimeout(ctx, c.buildTimeout)
		var build time.Duration
		for j, sid := range ids {
			start := time.Now()
			for range size / 2 {
				if _, err := e.t.waitTurn(bctx, sid, body); err != nil {
					cancel()
					return nil, fmt.Errorf("building %d sessions of %d messages (--build-timeout %s): %w", len(ids), size, c.buildTimeout, err)
				}
			}
			if j == 0 {
				build = time.Since(start)
			}
		}
		cancel()

		sid := ids[0]
		start := time.Now()
		msgs, pages, _, err := e.listMessages(ctx, sid)
		if err != nil {
			return nil, err
		}
		list := time.Since(start)
		if msgs != size {
			return nil, fmt.Errorf("the session of %d turns lists %d messages, want %d", size/2, msgs, size)
		}
		start = time.Now()
		rows, err := sqliteMessages(ctx, db, sid)
		if err != nil {
			return nil, err
		}
		direct := time.Since(start)
		if rows != size {
			return nil, fmt.Errorf("the database holds %d messages of the session, want %d", rows, size)
		}

		u0, err := e.used(ctx)
		if err != nil {
			return nil, err
		}
		n := 0
		lat, err := series(ctx, 0, c.longTurns, func(ctx context.Context) (time.Duration, error) {
			n++
			return e.t.waitTurn(ctx, ids[(n-1)%len(ids)], body)
		})
		if err != nil {
			return nil, err
		}
		u1, err := e.used(ctx)
		if err != nil {
			return nil, err
		}
		turn, cpu := median(lat), u1.sub(u0).cpu/time.Duration(c.longTurns)
		l := fmt.Sprintf("%d messages: ", size)
		floorTurn, floorCPU, floorIs := math.NaN(), math.NaN(), "— (the shortest sessions)"
		if i == 0 {
			turn0, cpu0 = turn, cpu
		} else {
			floorTurn, floorCPU, floorIs = float64(turn0), float64(cpu0), fmt.Sprintf("the same at %d messages", c.messages[0])
		}
		figs = append(figs,
			figure{label: l + "trivial turn (p50)", kind: kindDuration, measured: float64(turn), floor: floorTurn, floorIs: floorIs},
			figure{label: l + "server CPU per trivial turn", kind: kindDuration, measured: float64(cpu), floor: floorCPU, floorIs: floorIs},
			durFigure(l+"list all, "+plural(pages, "page"), list, direct, "the same rows read from the SQLite file"),
			figure{label: l + fmt.Sprintf("building one, %d turns", size/2), kind: kindDuration, measured: float64(build), floor: math.NaN(), floorIs: "—"},
		)
	}
	return figs, nil
}

func describeRSS(c *realloadConfig) string {
	return fmt.Sprintf("%s (scripted/echo) over %s, a client each; floor: the RSS right after start plus the growth of the Go heap's live set (HeapAlloc after a forced GC, from --pprof-addr)",
		plural(c.rssTurns, "trivial turn"), plural(c.rssSessions, "session"))
}

func runRSS(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error) {
	m0, err := readMemStatus(e.sp.pid)
	if err != nil {
		return nil, err
	}
	live0, err := e.heapLive(ctx)
	if err != nil {
		return nil, err
	}
	agent, err := e.agent(ctx, "scripted/echo")
	if err != nil {
		return nil, err
	}
	ids, err := e.t.createSessions(ctx, agent, c.rssSessions)
	if err != nil {
		return nil, err
	}
	if err := e.turnsOver(ctx, ids, c.rssTurns); err != nil {
		return nil, err
	}
	m1, err := readMemStatus(e.sp.pid) // before the GC heapLive forces
	if err != nil {
		return nil, err
	}
	live1, err := e.heapLive(ctx)
	if err != nil {
		return nil, err
	}
	db, err := openReadOnly(ctx, e.sp.db)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	text, err := textBytes(ctx, db)
	if err != nil {
		return nil, err
	}
	const kb = 1024 // VmRSS is in KiB
	floor := float64(m0.rss*kb + live1 - live0)
	l := fmt.Sprintf("after %s over %s: ", plural(c.rssTurns, "turn"), plural(c.rssSessions, "session"))
	return []figure{
		{label: "RSS right after start", kind: kindBytes, measured: float64(m0.rss * kb), floor: math.NaN(), floorIs: "—"},
		{label: l + "RSS", kind: kindBytes, measured: float64(m1.rss * kb), floor: floor, floorIs: "RSS at start + growth of the live heap"},
		{label: l + "peak RSS (VmHWM)", kind: kindBytes, measured: float64(m1.hwm * kb), floor: floor, floorIs: "the same"},
		{label: l + "Go heap live after GC", kind: kindBytes, measured: float64(live1), floor: float64(live0 + text), floorIs: "live heap at start + the text the sessions hold"},
	}, nil
}

func describeDisk(c *realloadConfig) string {
	return fmt.Sprintf("%s (scripted/echo) over %s; database size (page_count × page_size, read-only connection) before and after; floors: the text the turns add, the JSON the API returns for their messages",
		plural(c.diskTurns, "trivial turn"), plural(c.diskSessions, "session"))
}

func runDisk(ctx context.Context, e *rlEnv, c *realloadConfig) ([]figure, error) {
	agent, err := e.agent(ctx, "scripted/echo")
	if err != nil {
		return nil, err
	}
	ids, err := e.t.createSessions(ctx, agent, c.diskSessions)
	if err != nil {
		return nil, err
	}
	db, err := openReadOnly(ctx, e.sp.db)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	size0, err := dbSize(ctx, db)
	if err != nil {
		return nil, err
	}
	text0, err := textBytes(ctx, db)
	if err != nil {
		return nil, err
	}
	if err := e.turnsOver(ctx, ids, c.diskTurns); err != nil {
		return nil, err
	}
	size1, err := dbSize(ctx, db)
	if err != nil {
		return nil, err
	}
	text1, err := textBytes(ctx, db)
	if err != nil {
		return nil, err
	}
	var js int64
	for _, sid := range ids {
		_, _, n, err := e.listMessages(ctx, sid)
		if err != nil {
			return nil, err
		}
		js += n
	}
	turns := float64(c.diskTurns)
	perTurn := float64(size1-size0) / turns
	return []figure{
		{label: "database growth per trivial turn", kind: kindBytes, measured: perTurn, floor: float64(text1-text0) / turns, floorIs: "the text the turn adds (its parts)"},
		{label: "database growth per trivial turn (vs JSON)", kind: kindBytes, measured: perTurn, floor: float64(js) / turns, floorIs: "the API's JSON of its messages"},
	}, nil
}
