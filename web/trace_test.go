package web_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/tracing"
	"github.com/chromedp/chromedp"
)

// traceEvent is one event of a Chromium trace (the JSON trace format).
type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`   // µs
	Dur  float64        `json:"dur"`  // wall time, µs
	TDur float64        `json:"tdur"` // time on the CPU, µs
	Args map[string]any `json:"args"`
}

// mainThreadTasks are the durations of the tasks a renderer's main thread
// ran during a trace, in ms: wall time (what the page could not respond
// during) and CPU time (the work itself, whatever else the machine did).
type mainThreadTasks struct {
	Count          int
	LongestWall    float64
	LongestCPU     float64
	Over50CPU      int // tasks of 50 ms or more of CPU time
	TotalCPU       float64
	LongestWallCPU float64  // the CPU time of the task with the longest wall time
	Top            []string // the five longest in CPU time: "at+cpu/wall" in ms from the first task
}

// startTrace records the top-level tasks of every thread until the
// returned function is called; that function returns what the renderers'
// main threads did.
func startTrace(b *browser) func() mainThreadTasks {
	b.t.Helper()
	var (
		mu     sync.Mutex
		events []traceEvent
	)
	done := make(chan struct{})
	if err := chromedp.Listen(b.ctx, func(ev any) {
		switch e := ev.(type) {
		case *tracing.EventDataCollected:
			mu.Lock()
			for _, v := range e.Value {
				var te traceEvent
				if json.Unmarshal([]byte(v), &te) == nil {
					events = append(events, te)
				}
			}
			mu.Unlock()
		case *tracing.EventTracingComplete:
			close(done)
		}
	}); err != nil {
		b.t.Fatal(err)
	}
	if _, err := chromedp.Call(b.ctx, tracing.Start, tracing.StartParams{TransferMode: tracing.StartTransferModeReportEvents,
		TraceConfig: &tracing.TraceConfig{IncludedCategories: []string{"toplevel", "devtools.timeline", "__metadata"}}}); err != nil {
		b.t.Fatal(err)
	}
	return func() mainThreadTasks {
		b.t.Helper()
		if _, err := chromedp.Call(b.ctx, tracing.End, cdp.Empty{}); err != nil {
			b.t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.t.Fatal("the trace did not complete")
		}
		mu.Lock()
		defer mu.Unlock()
		type thread struct{ pid, tid int }
		main := map[thread]bool{}
		for _, e := range events {
			if e.Ph == "M" && e.Name == "thread_name" && e.Args["name"] == "CrRendererMain" {
				main[thread{e.Pid, e.Tid}] = true
			}
		}
		var out mainThreadTasks
		var cpu []float64
		for _, e := range events {
			if e.Ph != "X" || !main[thread{e.Pid, e.Tid}] || e.Name != "ThreadControllerImpl::RunTask" {
				continue
			}
			w, c := e.Dur/1000, e.TDur/1000
			out.Count++
			out.TotalCPU += c
			if w > out.LongestWall {
				out.LongestWall, out.LongestWallCPU = w, c
			}
			cpu = append(cpu, c)
			if c >= 50 {
				out.Over50CPU++
			}
		}
		sort.Float64s(cpu)
		if len(cpu) > 0 {
			out.LongestCPU = cpu[len(cpu)-1]
		}
		var tasks []traceEvent
		start := -1.0
		for _, e := range events {
			if e.Ph == "X" && main[thread{e.Pid, e.Tid}] && e.Name == "ThreadControllerImpl::RunTask" {
				tasks = append(tasks, e)
				if start < 0 || e.Ts < start {
					start = e.Ts
				}
			}
		}
		sort.Slice(tasks, func(i, j int) bool { return tasks[i].TDur > tasks[j].TDur })
		for _, e := range tasks[:min(5, len(tasks))] {
			// What the task was made of: the timeline events inside it.
			inside := map[string]float64{}
			for _, c := range events {
				if c.Ph == "X" && c.Pid == e.Pid && c.Tid == e.Tid && c.Ts >= e.Ts && c.Ts+c.Dur <= e.Ts+e.Dur && c.Name != e.Name {
					name := c.Name
					if d, ok := c.Args["data"].(map[string]any); ok {
						if u, ok := d["url"].(string); ok && u != "" {
							name += " " + u[strings.LastIndex(u, "/")+1:]
						}
						if f, ok := d["functionName"].(string); ok && f != "" {
							name += " " + f
						}
					}
					inside[name] += c.TDur / 1000
				}
			}
			var parts []string
			for n, d := range inside {
				if d >= 2 {
					parts = append(parts, fmt.Sprintf("%s %.0f", n, d))
				}
			}
			sort.Strings(parts)
			out.Top = append(out.Top, fmt.Sprintf("%.0f+%.0f/%.0f ms [%s]", (e.Ts-start)/1000, e.TDur/1000, e.Dur/1000, strings.Join(parts, "; ")))
		}
		return out
	}
}
