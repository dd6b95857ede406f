package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func runIdleSSE(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("idle-sse", flag.ContinueOnError)
	var c common
	c.register(fs)
	subscribers := fs.Int("subscribers", 1000, "idle SSE subscriptions to hold open, each on its own session (1..10000; above 1000, start the server with a larger --max-streams-per-tenant)")
	duration := fs.Duration("duration", 10*time.Second, "how long to hold them once all are open (up to 1h)")
	pid := fs.Int("pid", 0, "process id of the server: print its RSS from /proc/PID/status (0: do not)")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	switch {
	case *subscribers < 1 || *subscribers > 10000:
		return fmt.Errorf("--subscribers must be 1..10000")
	case *duration <= 0 || *duration > time.Hour:
		return fmt.Errorf("--duration must be more than 0 and at most 1h")
	case *pid < 0:
		return fmt.Errorf("--pid must not be negative")
	}
	var rss func() (memStatus, error)
	if *pid > 0 {
		rss = func() (memStatus, error) { return readMemStatus(*pid) }
		if _, err := rss(); err != nil {
			return err
		}
	}

	t, err := c.connect(ctx, *subscribers)
	if err != nil {
		return err
	}
	defer t.close()
	agent, err := t.createAgent(ctx, nil)
	if err != nil {
		return err
	}
	ids, err := t.createSessions(ctx, agent, *subscribers)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "forge-load idle-sse: server %s, %d subscribers (one per session), held %s\n", t.base, *subscribers, *duration)
	report := func(label string) memStatus {
		if rss == nil {
			return memStatus{}
		}
		m, err := rss()
		if err != nil {
			fmt.Fprintf(out, "%-28s %v\n", label, err)
			return memStatus{}
		}
		fmt.Fprintf(out, "%-28s VmRSS %s  (VmHWM %s)\n", label, kib(m.rss), kib(m.hwm))
		return m
	}
	before := report("server RSS before:")

	// Open the subscriptions, 64 at a time; each stays open until holdCtx
	// ends.
	holdCtx, cancelHold := context.WithCancel(ctx)
	defer cancelHold()
	var (
		readers sync.WaitGroup
		open    atomic.Int64
		ended   atomic.Int64 // streams that ended while they should be held
		recv    atomic.Int64 // bytes received (keep-alive pings)
		mu      sync.Mutex
		openErr error
	)
	sem := make(chan struct{}, 64)
	start := time.Now()
	for _, sid := range ids {
		if holdCtx.Err() != nil {
			break
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			body, err := t.subscribe(holdCtx, sid)
			if err != nil {
				mu.Lock()
				if openErr == nil {
					openErr = err
				}
				mu.Unlock()
				cancelHold()
				return
			}
			open.Add(1)
			readers.Go(func() {
				defer body.Close()
				n, _ := io.Copy(io.Discard, body)
				recv.Add(n)
				if holdCtx.Err() == nil {
					ended.Add(1)
				}
			})
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	opened := time.Since(start)
	mu.Lock()
	err = openErr
	mu.Unlock()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		cancelHold()
		readers.Wait()
		return fmt.Errorf("opening subscriptions (%d open): %w", open.Load(), err)
	}
	fmt.Fprintf(out, "subscribers open             %d in %.3f s\n", open.Load(), opened.Seconds())

	// Hold them, sampling the RSS each second; the first sample comes after
	// a short settle.
	var peak memStatus
	deadline := time.NewTimer(*duration)
	defer deadline.Stop()
	tick := time.NewTicker(min(time.Second, *duration))
	defer tick.Stop()
	samples := 0
hold:
	for {
		select {
		case <-ctx.Done():
			break hold
		case <-deadline.C:
			break hold
		case <-tick.C:
			if rss == nil {
				continue
			}
			if m, err := rss(); err == nil {
				samples++
				if m.rss > peak.rss {
					peak = m
				}
			}
		}
	}
	during := report("server RSS while open:")
	if during.rss > peak.rss {
		peak = during
	}
	still := open.Load() - ended.Load()
	cancelHold()
	readers.Wait()
	if rss != nil {
		fmt.Fprintf(out, "%-28s VmRSS %s over %d samples\n", "server RSS peak while open:", kib(peak.rss), samples+1)
		if before.rss > 0 && during.rss > 0 {
			d := during.rss - before.rss
			fmt.Fprintf(out, "%-28s %s, %.1f KiB per subscriber\n", "RSS growth:", kib(d), float64(d)/float64(*subscribers))
		}
	} else {
		fmt.Fprintln(out, "server RSS                   not measured (pass --pid)")
	}
	fmt.Fprintf(out, "subscribers still open       %d of %d at the end; %d bytes of keep-alives received\n", still, open.Load(), recv.Load())
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if still != open.Load() {
		return fmt.Errorf("%d subscriptions ended while they were held", open.Load()-still)
	}
	return nil
}

// subscribe opens the session's event stream and returns its body once the
// server has answered 200 with an event stream (the transport bounds the
// wait for the answer's headers).
func (t *target) subscribe(ctx context.Context, sid string) (io.ReadCloser, error) {
	req, err := t.request(ctx, http.MethodGet, "/v1/sessions/"+sid+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("subscribing to %s: answered %q, not an event stream", sid, ct)
	}
	return resp.Body, nil
}

// memStatus is a process's resident memory, in KiB.
type memStatus struct {
	rss, hwm int64
}

// readMemStatus reads VmRSS and VmHWM from /proc/PID/status.
func readMemStatus(pid int) (memStatus, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return memStatus{}, fmt.Errorf("reading the RSS of pid %d: %w", pid, err)
	}
	defer f.Close()
	var m memStatus
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &m.rss
		case "VmHWM":
			dst = &m.hwm
		default:
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return memStatus{}, fmt.Errorf("pid %d: bad %s line %q", pid, k, sc.Text())
		}
		*dst = n
	}
	if err := sc.Err(); err != nil {
		return memStatus{}, err
	}
	if m.rss == 0 {
		return memStatus{}, fmt.Errorf("pid %d has no VmRSS (a kernel thread, or gone)", pid)
	}
	return m, nil
}

func kib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/1024)
}
