package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
	"github.com/forge-runtime/forge/provider/scripted"
)

func runDeltas(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("deltas", flag.ContinueOnError)
	var c common
	c.register(fs)
	deltas := fs.Int("deltas", 20000, "deltas in the streamed reply (1..1000000)")
	chunk := fs.Int("chunk", 1, "characters per delta (1..64)")
	turns := fs.Int("turns", 1, "streamed turns to run one after the other, each on a new session (1..100)")
	timeout := fs.Duration("timeout", 2*time.Minute, "longest one turn may stream")
	if err := parseFlags(fs, args, errOut); err != nil {
		return err
	}
	switch {
	case *deltas < 1 || *deltas > 1_000_000:
		return fmt.Errorf("--deltas must be 1..1000000")
	case *chunk < 1 || *chunk > 64:
		return fmt.Errorf("--chunk must be 1..64")
	case *turns < 1 || *turns > 100:
		return fmt.Errorf("--turns must be 1..100")
	case *timeout <= 0 || *timeout > time.Hour:
		return fmt.Errorf("--timeout must be more than 0 and at most 1h")
	case *deltas**chunk > 3<<20:
		return fmt.Errorf("--deltas times --chunk must be at most 3 MiB (the script travels in the agent's body)")
	}

	t, err := c.connect(ctx, 1)
	if err != nil {
		return err
	}
	defer t.close()
	script := scripted.Script(scripted.Step{Text: strings.Repeat("x", *deltas**chunk), Chunk: *chunk})
	agent, err := t.createAgent(ctx, script)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "forge-load deltas: server %s, %d turn(s) of %d deltas of %d character(s), one SSE client\n",
		t.base, *turns, *deltas, *chunk)

	var sumDeltas, sumLost int
	var sumSpan, sumTotal time.Duration
	for i := range *turns {
		ids, err := t.createSessions(ctx, agent, 1)
		if err != nil {
			return err
		}
		r, err := t.streamTurn(ctx, ids[0], *timeout)
		if err != nil {
			return err
		}
		if r.deltas > *deltas {
			return fmt.Errorf("turn %d: received %d deltas, more than the %d sent", i+1, r.deltas, *deltas)
		}
		fmt.Fprintf(out, "turn %-4d  %d deltas (%d frame bytes), first to last delta %.3f s: %.0f deltas/s; whole turn %.3f s: %.0f deltas/s\n",
			i+1, r.deltas, r.bytes, r.span.Seconds(), rate(r.deltas, r.span), r.total.Seconds(), rate(r.deltas, r.total))
		if lost := *deltas - r.deltas; lost > 0 {
			// Deltas the stream did not carry (a server fault: the
			// final model.message still has the text, but a streaming
			// client shows it late).
			fmt.Fprintf(out, "turn %-4d  LOST %d of %d deltas (not on the stream; the final model.message has the whole text)\n", i+1, lost, *deltas)
		}
		sumLost += *deltas - r.deltas
		sumDeltas += r.deltas
		sumSpan += r.span
		sumTotal += r.total
	}
	fmt.Fprintf(out, "deltas/s   %.0f (first to last delta), %.0f (whole turns, request to turn.done)\n",
		rate(sumDeltas, sumSpan), rate(sumDeltas, sumTotal))
	fmt.Fprintf(out, "received   %d of %d deltas sent (%d lost)\n", sumDeltas, *deltas**turns, sumLost)
	if sumLost > 0 {
		return fmt.Errorf("the streams did not carry %d of the %d deltas sent", sumLost, *deltas**turns)
	}
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

type streamResult struct {
	deltas int
	bytes  int64           // data bytes of the delta frames
	span   time.Duration   // first delta to last delta received
	total  time.Duration   // request sent to turn.done received
	ttfd   time.Duration   // request sent to the first delta received (0: none)
	text   strings.Builder // the deltas' text, joined
}

// streamTurn runs one streamed turn and reads its SSE frames until
// turn.done, counting the model.message.delta frames.
func (t *target) streamTurn(ctx context.Context, sid string, timeout time.Duration) (streamResult, error) {
	var r streamResult
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := t.request(ctx, http.MethodPost, "/v1/sessions/"+sid+"/turns", turnBody("go", true))
	if err != nil {
		return r, err
	}
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := t.hc.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, apiError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return r, fmt.Errorf("streamed turn answered %q, not an event stream", ct)
	}
	sse := client.NewSSEReader(resp.Body)
	var first, last time.Time
	for {
		f, err := sse.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended before turn.done")
			}
			return r, err
		}
		switch f.Event {
		case forge.EventModelDelta:
			last = time.Now()
			if r.deltas == 0 {
				first = last
			}
			r.deltas++
			r.bytes += int64(len(f.Data))
			var ev struct {
				Data forge.DeltaData `json:"data"`
			}
			if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
				return r, fmt.Errorf("delta frame: %w", err)
			}
			r.text.WriteString(ev.Data.Delta)
		case forge.EventTurnDone:
			r.total = time.Since(start)
			r.span = last.Sub(first)
			if r.deltas > 0 {
				r.ttfd = first.Sub(start)
			}
			var ev struct {
				Data struct {
					ID     string          `json:"id"`
					Status string          `json:"status"`
					Error  json.RawMessage `json:"error"`
				} `json:"data"`
			}
			if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
				return r, fmt.Errorf("turn.done frame: %w", err)
			}
			if ev.Data.Status != "done" {
				return r, fmt.Errorf("turn %s ended %s: %s", ev.Data.ID, ev.Data.Status, ev.Data.Error)
			}
			return r, nil
		case "error":
			return r, fmt.Errorf("stream error frame: %s", f.Data)
		}
	}
}
