package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/forge-runtime/forge"
)

// Publish appends ev to its session's stream and publishes it to the
// session's subscribers on every replica. A seq at or below the session's
// last is refused (ErrConflict), as is a delta of a turn the stream saw end
// (ErrTurnEnded).
func (b *Bus) Publish(ctx context.Context, ev forge.Event) error {
	_, err := b.publish(ctx, "plain", "", ev.SessionID, []forge.Event{ev})
	return err
}

// BeginTurn keeps the session's events while turnID runs.
func (b *Bus) BeginTurn(ctx context.Context, sessionID, turnID string) error {
	return b.turn(ctx, "begin", sessionID, turnID)
}

// EndTurn starts the retention of the session's events once turnID (its
// running turn, or any turn when none runs) has ended.
func (b *Bus) EndTurn(ctx context.Context, sessionID, turnID string) error {
	return b.turn(ctx, "end", sessionID, turnID)
}

func (b *Bus) turn(ctx context.Context, op, sessionID, turnID string) error {
	k := b.keys(sessionID)
	err := turnScript.Run(ctx, b.pick(sessionID).rdb, []string{k.stream, k.open, k.meta}, op, turnID,
		ms(b.opts.Retention), ms(b.opts.RunningTTL)).Err()
	if err != nil {
		return fmt.Errorf("redis: %s turn %s: %w", op, turnID, err)
	}
	return nil
}

// PublishEphemeral publishes ev (Seq 0) on the session's channel only:
// the subscribers open now get it; nothing keeps it.
func (b *Bus) PublishEphemeral(ctx context.Context, ev forge.Event) error {
	if ev.Seq != 0 {
		return forge.Errorf(forge.ErrInvalid, "redis: an ephemeral event has no seq (got %d)", ev.Seq)
	}
	raw, err := json.Marshal(&ev)
	if err != nil {
		return fmt.Errorf("redis: encode ephemeral event: %w", err)
	}
	if err := b.pick(ev.SessionID).rdb.Publish(ctx, b.keys(ev.SessionID).channel, ephemeralMark+string(raw)).Err(); err != nil {
		return fmt.Errorf("redis: publish ephemeral event: %w", err)
	}
	return nil
}

// ephemeralMark starts the channel message of an ephemeral event (a seq
// event's starts with its seq).
const ephemeralMark = "x "

// Acquire waits until this process holds the session's writer hold. fresh
// is false when another process held it since this one last did (or that
// is not known any more: the session's keys expired).
func (b *Bus) Acquire(ctx context.Context, sessionID string) (string, bool, error) {
	k, rdb := b.keys(sessionID), b.pick(sessionID).rdb
	token := b.opts.WriterID + "/" + strconv.FormatUint(b.holds.Add(1), 10)
	wait := time.Millisecond
	for {
		r, err := acquireScript.Run(ctx, rdb, []string{k.hold, k.meta}, token, b.opts.WriterID,
			ms(b.opts.HoldTTL), ms(b.opts.Retention)).Int()
		if err != nil {
			return "", false, fmt.Errorf("redis: acquire session %s: %w", sessionID, err)
		}
		if r >= 0 {
			return token, r == 1, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", false, ctx.Err()
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Release publishes evs and ends the hold.
func (b *Bus) Release(ctx context.Context, sessionID, hold string, evs []forge.Event) error {
	_, err := b.publish(ctx, "release", hold, sessionID, evs)
	return err
}

// PublishUnheld publishes deltas (of one session, in seq order) without a
// hold when nobody holds the session and this process wrote it last: all
// of them, or none. The calls of many sessions to one server go in one
// script call (publishGroups).
func (b *Bus) PublishUnheld(ctx context.Context, evs ...forge.Event) (bool, error) {
	if len(evs) == 0 {
		return true, nil
	}
	sessionID := evs[0].SessionID
	args, err := b.eventArgs(nil, sessionID, evs)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := &publishReq{session: sessionID, events: args, done: make(chan struct{}), lead: make(chan struct{})}
	n := b.pick(sessionID)
	n.unheld.publish(b, n, r)
	if r.err != nil {
		return false, fmt.Errorf("redis: publish to session %s: %w", sessionID, r.err)
	}
	return b.answer("unheld", sessionID, evs[0].Seq, r.res)
}

// Backlog is the bound of a session's kept entries (forge.Backlogger).
func (b *Bus) Backlog() int { return b.opts.MaxLen }

// publish runs publishScript and maps its answer: done is false for an
// unheld publish that needs a hold.
func (b *Bus) publish(ctx context.Context, mode, token, sessionID string, evs []forge.Event) (done bool, err error) {
	k := b.keys(sessionID)
	args := make([]any, 0, 6+8*len(evs))
	args = append(args, mode, token, b.opts.MaxLen, ms(b.opts.Retention), ms(b.opts.RunningTTL), k.channel)
	args, err = b.eventArgs(args, sessionID, evs)
	if err != nil {
		return false, err
	}
	res, err := publishScript.Run(ctx, b.pick(sessionID).rdb, []string{k.stream, k.open, k.meta, k.hold}, args...).StringSlice()
	if err != nil {
		return false, fmt.Errorf("redis: publish to session %s: %w", sessionID, err)
	}
	var first int64
	if len(evs) > 0 {
		first = evs[0].Seq
	}
	return b.answer(mode, sessionID, first, res)
}

// eventArgs appends evs' values for publishLua to args: 8 per event, and
// 8 per text so far row before its event.
func (b *Bus) eventArgs(args []any, sessionID string, evs []forge.Event) ([]any, error) {
	for i := range evs {
		ev := &evs[i]
		if ev.SessionID != sessionID {
			return nil, forge.Errorf(forge.ErrInvalid, "redis: event of session %s published to %s", ev.SessionID, sessionID)
		}
		if ev.Seq <= 0 {
			return nil, forge.Errorf(forge.ErrInvalid, "redis: event without a seq (use PublishEphemeral)")
		}
		for j := range ev.TextSoFar {
			row := &ev.TextSoFar[j]
			raw, err := row.JSON()
			if err != nil {
				return nil, fmt.Errorf("redis: encode the text so far of %s: %w", row.ID, err)
			}
			args = append(args, row.Seq, "r", "", row.ID, "", 0, "", raw)
		}
		kind, part, delta, err := entryKind(ev)
		if err != nil {
			return nil, err
		}
		raw, err := ev.JSON()
		if err != nil {
			return nil, fmt.Errorf("redis: encode event %d: %w", ev.Seq, err)
		}
		turn, thread := "", ""
		if ev.TurnID != nil {
			turn = *ev.TurnID
		}
		if ev.ThreadID != nil {
			thread = *ev.ThreadID
		}
		args = append(args, ev.Seq, kind, turn, part, delta, ev.CreatedAt.UnixNano(), thread, raw)
	}
	return args, nil
}

// answer maps publishLua's answer for a session; first is the first
// event's seq, for the conflict's error.
func (b *Bus) answer(mode, sessionID string, first int64, res []string) (done bool, err error) {
	switch {
	case len(res) == 0:
		return false, fmt.Errorf("redis: publish to session %s: empty answer", sessionID)
	case res[0] == "ok":
		return true, nil
	case res[0] == "busy" || res[0] == "stale":
		return false, nil
	case res[0] == "lost":
		return false, forge.Errorf(forge.ErrConflict, "redis: the writer hold of session %s expired before its events were published", sessionID)
	case res[0] == "conflict" && mode == "unheld":
		return false, nil
	case res[0] == "conflict":
		return false, forge.Errorf(forge.ErrConflict, "redis: seq %d of session %s is not above the last published seq %s", first, sessionID, at(res, 1))
	case res[0] == "ended":
		return false, forge.Errorf(forge.ErrTurnEnded, "redis: turn %s of session %s has ended or is not the running one: its delta is dropped", at(res, 1), sessionID)
	}
	return false, fmt.Errorf("redis: publish to session %s: unexpected answer %q", sessionID, res)
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// entryKind tells the publish script what ev does to the session's state:
// a turn begins or ends, a part's row is forgotten, a delta (its text from
// Event.Delta, which the event log sets; decoded only when it is empty).
func entryKind(ev *forge.Event) (kind, part, delta string, err error) {
	switch ev.Type {
	case forge.EventTurnCreated:
		return "b", "", "", nil
	case forge.EventTurnDone:
		return "e", "", "", nil
	case forge.EventModelDelta:
		if ev.Delta != "" {
			return "d", ev.ID, ev.Delta, nil
		}
		var d forge.DeltaData
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return "", "", "", forge.Errorf(forge.ErrInvalid, "redis: delta %d: %v", ev.Seq, err)
		}
		return "d", ev.ID, d.Delta, nil
	case forge.EventModelMessage:
		return "m", ev.ID, "", nil
	}
	return "", "", "", nil
}

// SendCancel publishes a cancel signal to every replica (on the server of
// its session: every replica listens on every server); the one running
// the turn acts on it.
func (b *Bus) SendCancel(ctx context.Context, sig forge.CancelSignal) error {
	raw, err := json.Marshal(&sig)
	if err != nil {
		return err
	}
	if err := b.pick(sig.SessionID).rdb.Publish(ctx, b.cancel, raw).Err(); err != nil {
		return fmt.Errorf("redis: send cancel: %w", err)
	}
	return nil
}

// OnCancel registers fn, called (on the bus's receiving goroutine: it
// must not block) with every cancel signal any replica sends.
func (b *Bus) OnCancel(fn func(forge.CancelSignal)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onCancel = append(b.onCancel, fn)
}

// TryLock takes the named lock for ttl, or extends it when this process
// already holds it, and reports whether this process holds it now. A
// holder that dies loses it after ttl. (The forum layer runs each agent
// stint's worker on the replica that holds the stint's lock.) Sharded, the
// lock lives on the server its name hashes to.
func (b *Bus) TryLock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	n, err := lockScript.Run(ctx, b.pick(name).rdb, []string{b.lockKey(name)}, b.opts.WriterID, ms(ttl)).Int()
	if err != nil {
		return false, fmt.Errorf("redis: lock %s: %w", name, err)
	}
	return n == 1, nil
}

// Unlock releases the named lock if this process holds it.
func (b *Bus) Unlock(ctx context.Context, name string) error {
	if err := unlockScript.Run(ctx, b.pick(name).rdb, []string{b.lockKey(name)}, b.opts.WriterID).Err(); err != nil {
		return fmt.Errorf("redis: unlock %s: %w", name, err)
	}
	return nil
}

func (b *Bus) lockKey(name string) string { return b.opts.Prefix + ":lock:{" + name + "}" }
