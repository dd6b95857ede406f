package openairesp

import (
	"encoding/json"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/protocol"
)

type numbered struct {
	typ string
	n   int64
}

func recordEvents(after int64) (*encoder, *[]numbered) {
	var out []numbered
	enc := newEncoder(Response{ID: "turn_1"}, after, func(typ string, data []byte) {
		var ev struct {
			N int64 `json:"sequence_number"`
		}
		_ = json.Unmarshal(data, &ev)
		out = append(out, numbered{typ, ev.N})
	})
	return enc, &out
}

// TestRecoveredShorterTextNumbersAboveLive: a crash after deltas that no
// checkpoint stored leaves the recovered part shorter than what a client
// streamed live. Recovery's events (a part's end and the turn's, at seqs
// above every seq published before the crash) must still be numbered
// above every number the client saw, so that a resume after its last
// number ends the response.
func TestRecoveredShorterTextNumbersAboveLive(t *testing.T) {
	running := &forge.Turn{ID: "turn_1", Status: forge.TurnRunning}
	start := &forge.Part{ID: "prt_1", Type: forge.PartText, State: forge.StateStreaming}
	live, seen := recordEvents(-1)
	for _, s := range []protocol.Step{
		{Kind: protocol.TurnStarted, Seq: 1, Turn: running},
		{Kind: protocol.PartStarted, Seq: 3, Part: start, PartID: "prt_1"},
		{Kind: protocol.PartDelta, Seq: 4, PartID: "prt_1", Text: "confirmed ", Offset: 0},
		{Kind: protocol.PartDelta, Seq: 5, PartID: "prt_1", Text: "before the checkpoint, ", Offset: 10},
		{Kind: protocol.PartDelta, Seq: 6, PartID: "prt_1", Text: "then streamed past it and lost", Offset: 33},
	} {
		live.step(s)
	}
	last := (*seen)[len(*seen)-1].n

	// After the restart: the stored log holds the part's start, its
	// checkpointed text closed by recovery, and the turn's end.
	cut := &forge.Part{ID: "prt_1", Type: forge.PartText, Text: "confirmed before the checkpoint, ", State: forge.StateInterrupted}
	cancelled := &forge.Turn{ID: "turn_1", Status: forge.TurnCancelled}
	resumed, rest := recordEvents(last)
	for _, s := range []protocol.Step{
		{Kind: protocol.TurnStarted, Seq: 1, Turn: running},
		{Kind: protocol.PartStarted, Seq: 3, Part: start, PartID: "prt_1"},
		{Kind: protocol.PartDelta, Seq: 9, PartID: "prt_1", Text: cut.Text, Offset: 0},
		{Kind: protocol.PartDone, Seq: 9, Part: cut, PartID: "prt_1"},
		{Kind: protocol.TurnDone, Seq: 11, Turn: cancelled},
	} {
		resumed.step(s)
	}
	want := []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"}
	if len(*rest) != len(want) {
		t.Fatalf("resume after %d sent %v, want %v", last, *rest, want)
	}
	prev := last
	for i, ev := range *rest {
		if ev.typ != want[i] || ev.n <= prev {
			t.Fatalf("resume after %d: event %d is %s at %d, want %s above %d", last, i, ev.typ, ev.n, want[i], prev)
		}
		prev = ev.n
	}
}
