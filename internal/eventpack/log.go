package eventpack

import (
	"fmt"
	"time"

	"github.com/forge-runtime/forge"
)

// How the stores use bodies: one per run of a write's events, packed
// without rows while the events' turn runs, and a turn's whole log packed
// again against its rows once it has ended (PackTurn).

// Packs are bounded so that reading a page decodes little more than it
// returns.
const (
	MaxPackEvents = 512
	MaxPackData   = 256 << 10
)

// Pack is a body with the seqs it spans.
type Pack struct {
	First, Last int64
	// Open is the running turn whose events these are, packed without its
	// rows until it ends; "" for a pack that stays as it is.
	Open string
	Body []byte
}

// Prepare checks a write's events (storeutil.CheckEvent does the rest)
// and returns them in seq order, a zero time set to now, in UTC. A seq
// twice is ErrConflict.
func Prepare(evs []forge.Event, now time.Time) ([]forge.Event, error) {
	out := make([]forge.Event, 0, len(evs))
	for _, e := range evs {
		if e.CreatedAt.IsZero() {
			e.CreatedAt = now
		}
		e.CreatedAt = e.CreatedAt.UTC()
		out = append(out, e)
	}
	out = Sorted(out)
	for i := 1; i < len(out); i++ {
		if out[i].Seq == out[i-1].Seq {
			return nil, forge.Errorf(forge.ErrConflict, "event seq %d already exists", out[i].Seq)
		}
	}
	return out, nil
}

// runs splits events in seq order into runs of consecutive events with
// the same turn id, each at most a pack's size.
func runs(evs []forge.Event) [][]forge.Event {
	var out [][]forge.Event
	start, data := 0, 0
	for i := range evs {
		if i > start && (!sameTurn(evs[i].TurnID, evs[start].TurnID) || i-start >= MaxPackEvents || data+len(evs[i].Data) > MaxPackData) {
			out = append(out, evs[start:i])
			start, data = i, 0
		}
		data += len(evs[i].Data)
	}
	if start < len(evs) {
		out = append(out, evs[start:])
	}
	return out
}

func sameTurn(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// Plain packs a write's events (in seq order) without rows. The packs of
// the running turn open (its events, when open is set) are marked to wait
// for its end.
func Plain(evs []forge.Event, open string) ([]Pack, error) {
	var out []Pack
	for _, run := range runs(evs) {
		body, err := Encode(run, run[0].TurnID, nil, nil)
		if err != nil {
			return nil, err
		}
		p := Pack{First: run[0].Seq, Last: run[len(run)-1].Seq, Body: body}
		if open != "" && run[0].TurnID != nil && *run[0].TurnID == open {
			p.Open = open
		}
		out = append(out, p)
	}
	return out, nil
}

// Against packs events (in seq order) against rows (RefsFor, whole as
// there) and returns the packs and the refs they hold.
func Against(evs []forge.Event, rows *Rows, whole string) ([]Pack, []Ref, error) {
	var out []Pack
	var all []Ref
	for _, run := range runs(evs) {
		refs := RefsFor(run, rows, whole)
		body, err := Encode(run, run[0].TurnID, refs, rows)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, Pack{First: run[0].Seq, Last: run[len(run)-1].Seq, Body: body})
		all = append(all, refs...)
	}
	return out, all, nil
}

// PackTurn packs an ended turn's log (evs, in seq order, decoded from its
// packs) against its rows. stops are the first seqs of the other packs
// among its events (events outside the turn written meanwhile): the turn's
// events are packed in runs between them, so that packs never overlap.
func PackTurn(t *forge.Turn, evs []forge.Event, stops []int64, rows *Rows) ([]Pack, []Ref, error) {
	var packs []Pack
	var refs []Ref
	start := 0
	for _, stop := range append(stops, t.LastSeq+1) {
		end := start
		for end < len(evs) && evs[end].Seq < stop {
			end++
		}
		if end > start {
			p, r, err := Against(evs[start:end], rows, t.ID)
			if err != nil {
				return nil, nil, err
			}
			packs, refs = append(packs, p...), append(refs, r...)
			start = end
		}
	}
	if start != len(evs) {
		return nil, nil, fmt.Errorf("eventpack: log of turn %s has events after its last seq %d", t.ID, t.LastSeq)
	}
	return packs, refs, nil
}
