package eventlog

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
)

func foldEvent(seq int64, typ, id string) forge.Event {
	turn := "turn_1"
	return forge.Event{Seq: seq, ID: id, Type: typ, SessionID: "ses_1", TurnID: &turn, CreatedAt: time.Unix(0, seq).UTC(), Data: json.RawMessage(`{}`)}
}

func foldDelta(seq int64, text string) forge.Event {
	ev := foldEvent(seq, forge.EventModelDelta, "prt_a")
	ev.Delta = text
	return ev
}

func rowText(t *testing.T, row forge.Event) string {
	t.Helper()
	var p forge.Part
	if err := json.Unmarshal(row.Data, &p); err != nil {
		t.Fatal(err)
	}
	return p.Text
}

// TestFoldCountsOnlyWhatTheBusTook: foldBatch leaves the session's folds
// as they were (a batch the bus did not take, unsent or dropped, counts
// for nothing), does not touch the caller's events, and gives an event a
// row once the part's oldest uncovered delta is a quarter behind it; a
// turn.done carries the rows of its turn's parts.
func TestFoldCountsOnlyWhatTheBusTook(t *testing.T) {
	f := folds{}
	start := foldEvent(1, forge.EventModelMessage, "prt_a")
	start.Part = &forge.Part{ID: "prt_a", Type: forge.PartText, State: forge.StateStreaming, Text: "<"}
	f.apply(&start)
	evs := []forge.Event{foldDelta(2, "a"), foldDelta(3, "b")}
	send, next := f.foldBatch(evs, 2)
	if sp := f["prt_a"]; sp.last != 0 || sp.unfolded != 0 || string(sp.text) != "<" {
		t.Fatalf("the session's folds moved before the bus took the batch: %+v", sp)
	}
	for _, ev := range evs {
		if ev.TextSoFar != nil {
			t.Fatalf("the caller's event %d was given rows", ev.Seq)
		}
	}
	if len(send[0].TextSoFar)+len(send[1].TextSoFar) != 0 || len(next["prt_a"].text) != 3 {
		t.Fatalf("rows before a quarter: %d %d", len(send[0].TextSoFar), len(send[1].TextSoFar))
	}
	// Not taken: the same seqs are folded again from the same state.
	send, next = f.foldBatch([]forge.Event{foldDelta(2, "a"), foldDelta(3, "b"), foldDelta(4, "c"), foldDelta(5, "d")}, 2)
	if len(send[2].TextSoFar) != 1 || send[2].TextSoFar[0].Seq != 3 || rowText(t, send[2].TextSoFar[0]) != "<ab" {
		t.Fatalf("row at seq 4: %+v", send[2].TextSoFar)
	}
	if len(send[3].TextSoFar) != 0 {
		t.Fatalf("a second row before a quarter: %+v", send[3].TextSoFar)
	}
	f = next // taken
	if sp := f["prt_a"]; sp.last != 5 || sp.unfolded != 4 || string(sp.text) != "<abcd" {
		t.Fatalf("folds once taken: last %d unfolded %d text %q", sp.last, sp.unfolded, sp.text)
	}
	done := foldEvent(6, forge.EventTurnDone, "turn_1")
	rows := f.rowsFor(&done, 100)
	if len(rows) != 1 || rows[0].Seq != 5 || rowText(t, rows[0]) != "<abcd" || rows[0].TurnID == nil || *rows[0].TurnID != "turn_1" {
		t.Fatalf("turn.done rows: %+v", rows)
	}
	done.TextSoFar = rows
	f.apply(&done)
	if len(f) != 0 {
		t.Fatalf("parts of the ended turn kept: %v", f)
	}
}
