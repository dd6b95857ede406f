package forum

import (
	"context"
	"iter"
	"sync"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/eventlog"
)

// TypingData is the data of forum.typing.
type TypingData struct {
	ParticipantID string `json:"participant_id"`
	Typing        bool   `json:"typing"`
}

// typingHub hands ephemeral forum.typing events to the forum streams
// reading now: never stored, never replayed. A reader too slow to take
// one misses it (the next one says the current state).
type typingHub struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[chan forge.Event]struct{}
}

func (h *typingHub) subscribe(forumID string) (chan forge.Event, func()) {
	ch := make(chan forge.Event, 16)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[string]map[chan forge.Event]struct{}{}
	}
	if h.subs[forumID] == nil {
		h.subs[forumID] = map[chan forge.Event]struct{}{}
	}
	h.subs[forumID][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[forumID], ch)
		if len(h.subs[forumID]) == 0 {
			delete(h.subs, forumID)
		}
	}
}

func (h *typingHub) publish(ev forge.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[ev.SessionID] {
		select {
		case ch <- ev:
		default:
		}
	}
}

// events merges the forum's event log (replay after `after`, then live)
// with the live typing events.
func (h *typingHub) events(ctx context.Context, log *eventlog.Log, tenant, forumID string, after int64) iter.Seq2[forge.Event, error] {
	return func(yield func(forge.Event, error) bool) {
		typing, unsubscribe := h.subscribe(forumID)
		defer unsubscribe()
		sub, err := log.Subscribe(ctx, tenant, forumID, after)
		if err != nil {
			yield(forge.Event{}, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		type item struct {
			ev  forge.Event
			err error
		}
		items := make(chan item)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev, err := range sub.Events(ctx, "") {
				select {
				case items <- item{ev, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		defer func() {
			cancel()
			<-done
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case it := <-items:
				if !yield(it.ev, it.err) || it.err != nil {
					return
				}
			case ev := <-typing:
				if !yield(ev, nil) {
					return
				}
			}
		}
	}
}
