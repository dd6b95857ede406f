package storeutil

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// MaxWebhookDeliveryAge is how long a delivery is retried before it fails
// for good (API.md: 24 h).
const MaxWebhookDeliveryAge = 24 * time.Hour

// NewWebhook checks w and returns the row to store: its id, creation
// time and a new secret set, its events deduplicated in API order.
func NewWebhook(w *forge.Webhook, ids forge.IDGen, now time.Time) (forge.Webhook, error) {
	if w == nil || w.Tenant == "" {
		return forge.Webhook{}, forge.Errorf(forge.ErrInvalid, "a webhook needs a tenant")
	}
	if strings.TrimSpace(w.URL) == "" {
		return forge.Webhook{}, forge.Errorf(forge.ErrInvalid, "url is required")
	}
	if len(w.Events) == 0 {
		return forge.Webhook{}, forge.Errorf(forge.ErrInvalid, "events must name at least one of %s", strings.Join(forge.WebhookEvents, ", "))
	}
	var events []string
	for _, t := range forge.WebhookEvents {
		if slices.Contains(w.Events, t) {
			events = append(events, t)
		}
	}
	for _, t := range w.Events {
		if !forge.IsWebhookEvent(t) {
			return forge.Webhook{}, forge.Errorf(forge.ErrInvalid, "events: %q is not an event webhooks deliver (known: %s)", t, strings.Join(forge.WebhookEvents, ", "))
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return forge.Webhook{}, fmt.Errorf("webhook secret: %w", err)
	}
	c := *w
	c.ID = ids.New(forge.PrefixWebhook)
	c.Events = events
	c.CreatedAt = now.UTC().Truncate(time.Microsecond) // what PostgreSQL keeps
	c.Secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
	return c, nil
}

// OutboxEvent is an event of a write that webhooks may deliver.
type OutboxEvent struct {
	ID      string
	Type    string
	Seq     int64
	Payload []byte // the event's envelope
}

// WebhookOutbox returns the events of a write (prepared: times set) that
// go to the endpoints subscribed to their type, with their envelopes.
func WebhookOutbox(evs []forge.Event) ([]OutboxEvent, error) {
	var out []OutboxEvent
	for i := range evs {
		e := &evs[i]
		if !forge.IsWebhookEvent(e.Type) {
			continue
		}
		payload := e.Wire
		if payload == nil {
			var err error
			if payload, err = json.Marshal(e); err != nil {
				return nil, fmt.Errorf("webhook payload of event %d: %w", e.Seq, err)
			}
		}
		// Event ids are not unique across types (turn.created and
		// turn.done carry the turn's), seqs within a session are.
		id := fmt.Sprintf("evt_%s_%d", e.SessionID, e.Seq)
		out = append(out, OutboxEvent{ID: id, Type: e.Type, Seq: e.Seq, Payload: payload})
	}
	return out, nil
}

// NextDeliveryAttempt is when a failed attempt is retried (the result's
// RetryIn from now), or nil when the delivery created at created has run
// out of time.
func NextDeliveryAttempt(r forge.DeliveryResult, created, now time.Time) *time.Time {
	if r.Delivered || r.RetryIn <= 0 {
		return nil
	}
	next := now.Add(r.RetryIn)
	if next.Sub(created) > MaxWebhookDeliveryAge {
		return nil
	}
	return &next
}

// DeliveryStatus is a delivery's status after an attempt.
func DeliveryStatus(r forge.DeliveryResult, next *time.Time) string {
	switch {
	case r.Delivered:
		return forge.DeliveryDelivered
	case next != nil:
		return forge.DeliveryPending
	default:
		return forge.DeliveryFailed
	}
}
