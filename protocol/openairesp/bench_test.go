package openairesp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openairesp"
)

// BenchmarkTrivialTurn compares a trivial turn (scripted/echo, waited
// for) through the native API and through the Responses API, over real
// loopback HTTP, a new session every 10 turns as in httpapi's benchmark.
// It reports p50 and p99 latency. The "paired" case alternates a native
// and a Responses turn on one server, so both see the same machine load,
// and reports both medians and the Responses path's added cost in percent
// of the native median.
//
//	go test -run '^$' -bench TrivialTurn -benchtime 3000x -count 3 ./protocol/openairesp/
func BenchmarkTrivialTurn(b *testing.B) {
	for _, api := range []string{"paired", "native", "responses", "responses-stream"} {
		b.Run(api, func(b *testing.B) {
			s := prototest.New(b, openairesp.Protocol{})
			s.Agent(`{"name":"bot","model":"scripted/echo"}`)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			post := func(path, body string) []byte {
				req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				out, _ := io.ReadAll(resp.Body)
				if resp.StatusCode >= 300 {
					b.Fatalf("%s: %d %s", path, resp.StatusCode, out)
				}
				return out
			}
			session := func() string {
				var ses struct {
					ID string `json:"id"`
				}
				_ = json.Unmarshal(post("/v1/sessions", `{"agent":"bot"}`), &ses)
				return ses.ID
			}
			lat := make([]time.Duration, 0, b.N)
			var other []time.Duration // paired: the Responses turns
			sid, sid2 := "", ""
			b.ResetTimer()
			for i := range b.N {
				if i%10 == 0 {
					b.StopTimer()
					sid, sid2 = session(), session()
					b.StartTimer()
				}
				start := time.Now()
				switch api {
				case "paired":
					native := func() {
						start := time.Now()
						post("/v1/sessions/"+sid+"/turns", `{"input":[{"type":"message","text":"hi"}]}`)
						lat = append(lat, time.Since(start))
					}
					responses := func() {
						start := time.Now()
						post("/openai/v1/responses", `{"model":"bot","input":"hi","conversation":"`+sid2+`"}`)
						other = append(other, time.Since(start))
					}
					if i%2 == 0 {
						native()
						responses()
					} else {
						responses()
						native()
					}
					continue
				case "native":
					post("/v1/sessions/"+sid+"/turns", `{"input":[{"type":"message","text":"hi"}]}`)
				case "responses":
					post("/openai/v1/responses", `{"model":"bot","input":"hi","conversation":"`+sid+`"}`)
				case "responses-stream":
					post("/openai/v1/responses", `{"model":"bot","input":"hi","conversation":"`+sid+`","stream":true}`)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			if api == "paired" {
				slices.Sort(other)
				n, r := lat[len(lat)/2], other[len(other)/2]
				b.ReportMetric(float64(n.Microseconds())/1000, "native-p50-ms")
				b.ReportMetric(float64(r.Microseconds())/1000, "responses-p50-ms")
				b.ReportMetric(100*float64(r-n)/float64(n), "added-%")
				return
			}
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
