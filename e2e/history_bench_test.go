package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// serverCPU is the CPU time (user + system) the forge serve process used
// so far, from /proc (clock ticks of 10 ms).
func serverCPU(b *testing.B, s *server) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/stat")
	if err != nil {
		b.Skip("no /proc: ", err)
	}
	// Fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// benchRuns makes each run's conversation its own (a conversation's
// first record wins: a run repeating another's would chain there).
var benchRuns int

// BenchmarkResentHistory measures what a request resending its
// conversation costs the server (CPU per request, from /proc, and p50
// latency over loopback HTTP) at 10 and 1,000 resent messages, against a
// real forge serve (SQLite). Every request forks one trivial turn
// (scripted echo) from the same point of a session holding the
// conversation (each case its own session); the cases differ only in how the point is named:
// previous_response_id (the baseline: no history sent), the history
// resent by content (matched by its key), or resent with Forge's item
// ids (matched by the last id). The difference to the baseline is the
// matching: parsing the larger body and one lookup, never a read of the
// session.
//
//	go test -run '^$' -bench ResentHistory -benchtime 300x ./e2e/
func BenchmarkResentHistory(b *testing.B) {
	s := start(b, b.TempDir()+"/forge.db", openaitest.New(b))
	s.agent(obj{"name": "bot", "model": "scripted/echo"})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	post := func(body []byte) obj {
		resp, err := client.Post(s.URL+"/openai/v1/responses", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			b.Fatalf("%d %s", resp.StatusCode, raw)
		}
		var out obj
		_ = json.Unmarshal(raw, &out)
		return out
	}
	for _, n := range []int{10, 1000} {
		for _, c := range []string{"previous_response_id", "content", "ids"} {
			b.Run(fmt.Sprintf("%d/%s", n, c), func(b *testing.B) {
				// A conversation of n messages Forge imports, then answers:
				// a session of its own per case (its own texts), so that the
				// forks of one case do not weigh on the next.
				benchRuns++
				var hist []any
				for i := range n / 2 {
					hist = append(hist, obj{"role": "user", "content": fmt.Sprintf("%s %d question %d", c, benchRuns, i)},
						obj{"role": "assistant", "content": fmt.Sprintf("answer %d", i)})
				}
				hist = append(hist, obj{"role": "user", "content": "start"})
				body, _ := json.Marshal(obj{"model": "bot", "input": hist})
				r0 := post(body)
				id := r0["id"].(string)
				byContent := append(slices.Clone(hist), obj{"role": "assistant", "content": "echo: start"})
				byID := append(slices.Clone(hist), r0["output"].([]any)...)
				bodies := make([][]byte, b.N)
				for i := range bodies {
					q := obj{"role": "user", "content": "q" + strconv.Itoa(i)}
					var req obj
					switch c {
					case "previous_response_id":
						req = obj{"model": "bot", "previous_response_id": id, "input": []any{q}}
					case "content":
						req = obj{"model": "bot", "input": append(slices.Clone(byContent), q)}
					case "ids":
						req = obj{"model": "bot", "input": append(slices.Clone(byID), q)}
					}
					bodies[i], _ = json.Marshal(req)
				}
				lat := make([]time.Duration, 0, b.N)
				cpu0 := serverCPU(b, s)
				b.ResetTimer()
				for i := range b.N {
					t0 := time.Now()
					r := post(bodies[i])
					lat = append(lat, time.Since(t0))
					if r["previous_response_id"] != id {
						b.Fatalf("chained from %v, want %s", r["previous_response_id"], id)
					}
				}
				b.StopTimer()
				cpu := serverCPU(b, s) - cpu0
				slices.Sort(lat)
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "server-cpu-ms/op")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(len(bodies[0]))/1024, "body-KiB")
			})
		}
	}
}
