package engine

import (
	"fmt"

	"github.com/forge-runtime/forge"
)

// SessionKind is what the layer owning a kind of session (the forum owns
// forums and monologues) tells the engine about those sessions. The engine
// knows only direct sessions itself: a session of any other kind takes
// turns only as its kind's policy allows (Config.Kinds), and none when no
// layer registered it.
type SessionKind struct {
	// Check refuses the turn requests this kind's sessions do not take.
	// Nil refuses every request.
	Check func(sess *forge.Session, req *TurnRequest) error
	// Order, when set, is the model's order of the session's messages.
	// Such a session takes messages outside turns (a forum's copies), so
	// each of its turns and views reads the whole branch in this order,
	// never from the history cache, and the engine never compacts it in
	// place (its owner replaces it instead).
	Order func([]*forge.Message) []*forge.Message
	// ResolutionKeepsTrigger makes a turn that only resolves calls answer
	// the same trigger as the paused turn it resumes.
	ResolutionKeepsTrigger bool
}

// kind returns the policy of sess's kind; nil for a direct session.
func (e *Engine) kind(sess *forge.Session) *SessionKind {
	if sess.Kind == forge.KindDirect {
		return nil
	}
	k, ok := e.kinds[sess.Kind]
	if !ok {
		return &SessionKind{}
	}
	return &k
}

// readsWhole reports whether sess's history is read whole, in its kind's
// order, for every turn and view (SessionKind.Order).
func (k *SessionKind) readsWhole() bool { return k != nil && k.Order != nil }

// checkKind refuses turns a session's kind does not take: a trigger or a
// request of a kind's owner is for that kind's sessions only, and
// schedules run in direct sessions.
func (e *Engine) checkKind(sess *forge.Session, req *TurnRequest) error {
	k := e.kind(sess)
	switch {
	case k == nil:
		if req.Trigger != nil || req.Owner {
			return forge.Errorf(forge.ErrInvalid, "session %s is not a monologue", sess.ID)
		}
	case k.Check == nil:
		return forge.Errorf(forge.ErrInvalid, "session %s is a %s: it takes no turns", sess.ID, sess.Kind)
	default:
		if err := k.Check(sess, req); err != nil {
			return err
		}
	}
	if req.ScheduleID != "" && k != nil {
		return forge.Errorf(forge.ErrInvalid, "session %s is a %s: schedules run in direct sessions", sess.ID, sess.Kind)
	}
	return nil
}

// validKinds checks Config.Kinds: the engine's own kind is not theirs to
// redefine.
func validKinds(kinds map[string]SessionKind) error {
	if _, ok := kinds[forge.KindDirect]; ok {
		return fmt.Errorf("engine: Config.Kinds cannot redefine %q sessions", forge.KindDirect)
	}
	return nil
}
