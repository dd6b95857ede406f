package forum

import (
	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
	"github.com/forge-runtime/forge/modelview"
)

// Kinds are the session kinds the forum layer owns, for engine.Config.Kinds:
// a forum takes no turns (its messages are posts), and a monologue takes
// turns only from the forum layer (a trigger, or the compaction before a
// swap) and resolutions of its paused turn from clients; its history is
// read whole in monologue order (copies arrive between turns).
func Kinds() map[string]engine.SessionKind {
	return map[string]engine.SessionKind{
		forge.KindForum: {Check: func(sess *forge.Session, _ *engine.TurnRequest) error {
			return forge.Errorf(forge.ErrInvalid, "session %s is a forum: post messages with POST /v1/forums/%s/messages, not turns", sess.ID, sess.ID)
		}},
		forge.KindMonologue: {Check: checkMonologueTurn, Order: modelview.MonologueOrder, ResolutionKeepsTrigger: true},
	}
}

// checkMonologueTurn refuses what clients may not ask of a monologue.
func checkMonologueTurn(sess *forge.Session, req *engine.TurnRequest) error {
	if req.Owner {
		return nil
	}
	if req.Compact {
		return forge.Errorf(forge.ErrInvalid, "session %s is a monologue: Forge compacts it by replacing it, not in place", sess.ID)
	}
	for _, in := range req.Input {
		if in.Type == forge.InputMessage {
			return forge.Errorf(forge.ErrInvalid, "session %s is a monologue: it takes no messages, only resolutions of its paused turn (post to the forum instead)", sess.ID)
		}
	}
	if req.Trigger != nil {
		return forge.Errorf(forge.ErrInvalid, "only the forum layer triggers monologue turns")
	}
	return nil
}
