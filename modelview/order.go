package modelview

import (
	"slices"
	"strings"

	"github.com/forge-runtime/forge"
)

// MonologueOrder puts a monologue's messages in the order the model reads
// them: a turn's messages stay together, and a copy ingested while a turn
// ran (or while it was paused) comes after that turn's messages, never
// between a tool call and the rest of its turn. Each message sorts by its
// anchor, the time in its turn's id (its own id for a message outside any
// turn), then by id; ids are time-sortable, so the anchor of a copy
// ingested during a turn is later than the turn's. msgs is not changed.
func MonologueOrder(msgs []*forge.Message) []*forge.Message {
	anchor := func(m *forge.Message) string {
		if m.TurnID != "" {
			return idTime(m.TurnID)
		}
		return idTime(m.ID)
	}
	out := slices.Clone(msgs)
	slices.SortStableFunc(out, func(a, b *forge.Message) int {
		if c := strings.Compare(anchor(a), anchor(b)); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// idTime is the time-sortable part of an id (after its type prefix).
func idTime(id string) string {
	if i := strings.IndexByte(id, '_'); i >= 0 {
		return id[i+1:]
	}
	return id
}
