package openaichat_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/forge-runtime/forge/protocol/internal/prototest"
	"github.com/forge-runtime/forge/protocol/openaichat"
)

// BenchmarkTrivialTurn alternates, on one server, a trivial turn
// (scripted/echo, waited for) through the native API and one through Chat
// Completions resending the whole conversation (a new conversation every
// 10 turns, so up to 19 resent messages), and reports both medians and
// the Chat Completions path's added cost in percent of the native median:
// the price of finding the conversation (hashing it, one lookup) and
// recording it (two writes).
//
//	go test -run '^$' -bench TrivialTurn -benchtime 2000x -count 3 ./protocol/openaichat/
func BenchmarkTrivialTurn(b *testing.B) {
	s := prototest.New(b, openaichat.Protocol{})
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
	var native, chat []time.Duration
	var sid string
	var history []json.RawMessage
	b.ResetTimer()
	for i := range b.N {
		if i%10 == 0 {
			b.StopTimer()
			var ses struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(post("/v1/sessions", `{"agent":"bot"}`), &ses)
			sid, history = ses.ID, nil
			b.StartTimer()
		}
		start := time.Now()
		post("/v1/sessions/"+sid+"/turns", `{"input":[{"type":"message","text":"hi"}]}`)
		native = append(native, time.Since(start))

		history = append(history, json.RawMessage(`{"role":"user","content":"hi `+itoa(i)+`"}`))
		body, _ := json.Marshal(map[string]any{"model": "bot", "messages": history})
		start = time.Now()
		out := post("/openai/v1/chat/completions", string(body))
		chat = append(chat, time.Since(start))
		var c struct {
			Choices []struct {
				Message json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(out, &c); err != nil || len(c.Choices) != 1 {
			b.Fatalf("completion %s", out)
		}
		history = append(history, c.Choices[0].Message)
	}
	b.StopTimer()
	slices.Sort(native)
	slices.Sort(chat)
	n, c := native[len(native)/2], chat[len(chat)/2]
	b.ReportMetric(float64(n.Microseconds())/1000, "native-p50-ms")
	b.ReportMetric(float64(c.Microseconds())/1000, "chat-p50-ms")
	b.ReportMetric(100*float64(c-n)/float64(n), "added-%")
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// BenchmarkImport is one completion of a conversation Forge has never
// seen, of 4999 earlier messages (imported into a new session) and a last
// user message: the import's price at its cap.
//
//	go test -run '^$' -bench Import -benchtime 20x ./protocol/openaichat/
func BenchmarkImport(b *testing.B) {
	s := prototest.New(b, openaichat.Protocol{})
	s.Agent(`{"name":"bot","model":"scripted/echo"}`)
	var m []string
	for i := range 2500 {
		m = append(m, `{"role":"user","content":"question `+itoa(i)+`"}`)
		if i < 2499 {
			m = append(m, `{"role":"assistant","content":"an answer of a few words `+itoa(i)+`"}`)
		}
	}
	body := `{"model":"bot","messages":[` + strings.Join(m, ",") + `]}`
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, _ := http.NewRequest("POST", s.URL+"/openai/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
}
