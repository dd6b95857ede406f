package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// TestRealLoad runs every scenario of the realload mode at small sizes,
// as documented (its own forge serve and fake model process per run), and
// checks that it prints every figure with a value, a floor where it has
// one, and a ratio.
func TestRealLoad(t *testing.T) {
	bin := buildForge(t)
	out := runMode(t, "realload", "--forge-bin", bin,
		"--deltas", "20", "--pace", "2ms,3ms", "--turns", "1", "--burst-turns", "2", "--trivial-turns", "2",
		"--streams", "1,3", "--concurrent-pace", "1ms",
		"--subscribers", "1,4", "--subscriber-turns", "2",
		"--messages", "4,40", "--long-turns", "3",
		"--rss-turns", "30", "--rss-sessions", "3",
		"--disk-turns", "20", "--disk-sessions", "2")
	var want []string
	for _, p := range []string{"paced 2ms: ", "paced 3ms: "} {
		want = append(want, p+"server CPU per delta", p+"server CPU per turn", p+"store writes per turn",
			p+"time to first delta (p50)", p+"request to turn.done (p50)")
	}
	want = append(want, "burst: time to first delta (p50)", "burst: request to turn.done (p50)", "burst: store writes per turn")
	for _, k := range []string{"1 stream: ", "3 streams: "} {
		want = append(want, k+"server CPU per delta", k+"store writes per turn", k+"stream, request to turn.done (p50)", k+"slowest stream")
	}
	for _, k := range []string{"1 reader: ", "4 readers: "} {
		want = append(want, k+"server CPU per delivered delta", k+"server CPU per turn", k+"last reader's first delta (p50)",
			k+"deltas delivered per turn")
	}
	want = append(want,
		"4 messages: trivial turn (p50)", "4 messages: server CPU per trivial turn", "4 messages: list all, 1 page", "4 messages: building one, 2 turns",
		"40 messages: trivial turn (p50)", "40 messages: server CPU per trivial turn", "40 messages: list all, 1 page", "40 messages: building one, 20 turns",
		"RSS right after start", "after 30 turns over 3 sessions: RSS", "after 30 turns over 3 sessions: peak RSS (VmHWM)",
		"after 30 turns over 3 sessions: Go heap live after GC",
		"database growth per trivial turn", "database growth per trivial turn (vs JSON)")
	rows := tableRows(t, out)
	for _, label := range want {
		if _, ok := rows[label]; !ok {
			t.Errorf("no figure %q", label)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d figures, want %d: %q", len(rows), len(want), slices.Sorted(maps.Keys(rows)))
	}
	// The figures that have no floor are the shortest sessions' and the
	// build times and the RSS at start; every other one has a floor and a
	// ratio.
	for label, r := range rows {
		noFloor := strings.HasPrefix(label, "4 messages: ") || strings.Contains(label, "building one") || label == "RSS right after start"
		if r.measured == "—" {
			t.Errorf("%s: no measured value", label)
		}
		if !noFloor && (r.floor == "—" || r.ratio == "—") && !strings.Contains(label, "CPU") {
			// CPU is counted in 10 ms ticks: at these sizes a floor
			// may be 0.
			t.Errorf("%s: no floor or ratio: %+v", label, r)
		}
	}
	// Every delta reached every reader, forge's as the bare broadcaster's.
	for _, label := range []string{"1 reader: deltas delivered per turn", "4 readers: deltas delivered per turn"} {
		r := rows[label]
		if wantN := map[bool]string{true: "20", false: "80"}[strings.HasPrefix(label, "1 ")]; r.measured != wantN || r.floor != wantN {
			t.Errorf("%s: %+v, want %s delivered of %s", label, r, wantN, wantN)
		}
	}
	if got := strings.Count(out, "\nrun 1   forge serve pid "); got != len(realloadScenarios) {
		t.Errorf("%d runs reported, want one per scenario:\n%s", got, out)
	}

	// With --repeat, each figure shows the range over the runs.
	out = runMode(t, "realload", "--forge-bin", bin, "--scenarios", "disk", "--disk-turns", "10", "--disk-sessions", "1", "--repeat", "2")
	if !strings.Contains(out, "\nrun 2   forge serve pid ") {
		t.Errorf("--repeat 2 reported no second run:\n%s", out)
	}
	if rows := tableRows(t, out); len(rows) != 2 {
		t.Errorf("--scenarios disk printed %d figures, want 2:\n%s", len(rows), out)
	}
}

type tableRow struct{ measured, floor, ratio string }

// tableRows parses the figures of realload's tables by label.
func tableRows(t *testing.T, out string) map[string]tableRow {
	t.Helper()
	rows := map[string]tableRow{}
	var header string
	for l := range strings.Lines(out) {
		l = strings.TrimRight(l, "\n")
		if strings.HasPrefix(l, "  figure ") {
			header = l
			continue
		}
		if header == "" || !strings.HasPrefix(l, "  ") {
			header = ""
			continue
		}
		// The columns start where the header's names do.
		at := func(name string) int { return len([]rune(header[:strings.Index(header, name)])) }
		r := []rune(l)
		cell := func(from, to int) string {
			if to > len(r) {
				to = len(r)
			}
			return strings.TrimSpace(string(r[from:to]))
		}
		m, f, ra, is := at("measured"), at("floor"), at("ratio"), at("floor is")
		label := cell(0, m)
		if _, dup := rows[label]; dup {
			t.Errorf("figure %q printed twice", label)
		}
		rows[label] = tableRow{measured: cell(m, f), floor: cell(f, ra), ratio: cell(ra, is)}
	}
	return rows
}

func TestRealLoadRefusals(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--spawn=false"},
		{"--scenarios", "paced,bogus"},
		{"--deltas", "0"},
		{"--pace", "0s"},
		{"--pace", "2ms,2s"},
		{"--streams", "0"},
		{"--streams", "1,x"},
		{"--subscribers", "1001"},
		{"--messages", "3"},
		{"--messages", "40,4"},
		{"--rss-turns", "0"},
		{"--repeat", "0"},
		{"--timeout", "0s"},
		{"--forge-bin", "/nonexistent/forge", "--scenarios", "disk"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append([]string{"realload"}, args...), &out, &errOut); err == nil {
			t.Errorf("forge-load realload %q: no error", args)
		}
	}
}

// TestPacedModelBytes: a paced reply is, byte for byte, openaitest's
// reply of the same pieces (but for the completion id and creation time),
// and its deltas come at least the pace apart.
func TestPacedModelBytes(t *testing.T) {
	t.Parallel()
	ref := openaitest.New(t)
	var pieces []string
	for i := range 7 {
		pieces = append(pieces, pacedPiece(i))
	}
	ref.SetDefault(openaitest.Text(pieces...))
	inst := startInstantModel()
	t.Cleanup(inst.Close)
	normal := regexp.MustCompile(`"id":"chatcmpl-OTEST\d+","object":"chat.completion.chunk","created":\d+`)
	post := func(url, body string) string {
		t.Helper()
		res, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%s: %d %s %v", url, res.StatusCode, b, err)
		}
		return string(normal.ReplaceAll(b, []byte(`"id":"X","object":"chat.completion.chunk","created":0`)))
	}
	for _, model := range []string{pacedModel(7, 0), pacedModel(7, 5*time.Millisecond)} {
		for _, body := range []string{string(floorBody(model)), fmt.Sprintf(`{"messages":[{"content":"hi","role":"user"}],"model":%q,"stream":true}`, model)} {
			want := post(ref.URL(), body)
			start := time.Now()
			got := post(inst.URL(), body)
			took := time.Since(start)
			if got != want {
				t.Errorf("%s:\ninstant:\n%s\nopenaitest:\n%s", body, got, want)
			}
			if spec, _ := parsePaced(model); took < time.Duration(spec.deltas-1)*spec.pace {
				t.Errorf("%s: answered in %s, before its %d deltas %s apart could be", model, took, spec.deltas, spec.pace)
			}
		}
	}
	for _, name := range []string{"paced-0x1ms", "paced-5", "paced-5x", "paced-5x-1ms", "paced-5x11s", "paced-x1ms", "gpt-4.1-mini"} {
		if _, ok := parsePaced(name); ok {
			t.Errorf("parsePaced(%q) accepted it", name)
		}
	}
}

// TestBroadcaster: the bare broadcaster sends every reader each delta
// frame, with forge's envelope, then turn.done; it refuses bad runs.
func TestBroadcaster(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	newBroadcaster().register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	const readers, deltas = 3, 25
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	got := make([][]client.Frame, readers)
	for i := range readers {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/broadcast/subscribe?topic=t", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer resp.Body.Close()
			sse := client.NewSSEReader(resp.Body)
			for {
				f, err := sse.Next()
				if err != nil {
					return
				}
				got[i] = append(got[i], f)
				if f.Event == forge.EventTurnDone {
					return
				}
			}
		})
	}
	resp, err := http.Post(fmt.Sprintf("%s/broadcast/run?topic=t&subscribers=%d&deltas=%d&pace=1ms", srv.URL, readers, deltas), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("run: %d", resp.StatusCode)
	}
	wg.Wait()
	envelope := []string{"created_at", "data", "id", "seq", "session_id", "thread_id", "turn_id", "type"}
	for i, frames := range got {
		if len(frames) != deltas+1 || frames[deltas].Event != forge.EventTurnDone {
			t.Fatalf("reader %d got %d frames, want %d deltas and turn.done", i, len(frames), deltas)
		}
		var text strings.Builder
		for j, f := range frames[:deltas] {
			var ev map[string]json.RawMessage
			if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
				t.Fatalf("reader %d frame %d: %v", i, j, err)
			}
			if keys := slices.Sorted(maps.Keys(ev)); f.Event != forge.EventModelDelta || !slices.Equal(keys, envelope) || f.ID != fmt.Sprint(j+1) {
				t.Fatalf("reader %d frame %d: %s %s %v", i, j, f.ID, f.Event, keys)
			}
			var d struct {
				Delta string `json:"delta"`
			}
			_ = json.Unmarshal(ev["data"], &d)
			text.WriteString(d.Delta)
		}
		var want strings.Builder
		for j := range deltas {
			want.WriteString(pacedPiece(j))
		}
		if text.String() != want.String() {
			t.Errorf("reader %d read %q", i, text.String())
		}
	}
	for _, q := range []string{"subscribers=0&deltas=1&pace=0s", "subscribers=1&deltas=0&pace=0s", "subscribers=1&deltas=1&pace=-1s", "subscribers=1&deltas=1"} {
		resp, err := http.Post(srv.URL+"/broadcast/run?"+q, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("run?%s: %d, want 400", q, resp.StatusCode)
		}
	}
}
