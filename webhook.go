package forge

import (
	"context"
	"slices"
	"time"
)

// PrefixWebhook is the id prefix of webhook endpoints.
const PrefixWebhook = "wh_"

// WebhookEvents are the event types an endpoint may subscribe to
// (API.md, "Webhooks"), in the order the API lists them.
var WebhookEvents = []string{EventTurnDone, EventActionRequired, EventForumMessage}

// IsWebhookEvent reports whether events of type t go to webhooks.
func IsWebhookEvent(t string) bool { return slices.Contains(WebhookEvents, t) }

// Webhook is a tenant's endpoint: where the events it subscribes to are
// delivered, signed with its secret (Standard Webhooks).
type Webhook struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"-"`
	URL         string    `json:"url"`
	Events      []string  `json:"events"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	// Secret is "whsec_" and the base64 of the signing key. The API shows
	// it once, in the answer to the creation; the store keeps it (the
	// dispatcher signs with it).
	Secret string `json:"-"`
}

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
)

// WebhookDelivery is one event on its way to one endpoint: the outbox
// row written in the event's own transaction, and what its attempts met.
type WebhookDelivery struct {
	// ID is the Standard Webhooks message id (webhook-id), the same on
	// every attempt: "evt_", the session id, "_" and the event's seq.
	ID        string `json:"id"`
	Tenant    string `json:"-"`
	WebhookID string `json:"webhook_id"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
	EventType string `json:"event_type"`
	Status    string `json:"status"`
	Attempts  int    `json:"attempts"`
	// ResponseCode is the HTTP status of the last attempt (0: none, or
	// no answer).
	ResponseCode int `json:"response_code"`
	// Error says why the last attempt failed ("" when it did not).
	Error         string     `json:"error"`
	CreatedAt     time.Time  `json:"created_at"`
	LastAttemptAt *time.Time `json:"last_attempt_at"`
	// NextAttemptAt is when it is tried next (nil once delivered or
	// failed for good).
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// Payload is the event's envelope as stored with it (JSON).
	Payload []byte `json:"-"`
}

// DueDelivery is a delivery a dispatcher claimed, with what it needs to
// send it.
type DueDelivery struct {
	WebhookDelivery
	URL    string
	Secret string
}

// DeliveryResult is the outcome of one attempt.
type DeliveryResult struct {
	// Delivered ends the delivery (a 2xx answer).
	Delivered    bool
	ResponseCode int
	Error        string
	// RetryIn, when Delivered is false, is when to try again; 0 ends the
	// delivery failed (its retries ran out).
	RetryIn time.Duration
}

// WebhookStore keeps endpoints and their outbox. Stores that implement it
// also write, in the transaction of every event write, one pending
// delivery for each endpoint of the tenant subscribed to the event's type
// (IsWebhookEvent), carrying the event's envelope: an event is committed
// with its deliveries or not at all.
type WebhookStore interface {
	// CreateWebhook stores w; it sets ID and CreatedAt.
	CreateWebhook(ctx context.Context, w *Webhook) error
	GetWebhook(ctx context.Context, tenant, id string) (*Webhook, error)
	// ListWebhooks lists a tenant's endpoints, oldest first.
	ListWebhooks(ctx context.Context, tenant string, opts ListOptions) ([]*Webhook, string, error)
	// DeleteWebhook deletes an endpoint and its deliveries.
	DeleteWebhook(ctx context.Context, tenant, id string) error
	// ListDeliveries lists an endpoint's deliveries, newest first.
	ListDeliveries(ctx context.Context, tenant, webhookID string, opts ListOptions) ([]*WebhookDelivery, string, error)
	// ClaimDeliveries crosses tenants: it claims up to limit pending
	// deliveries that are due, for owner, for ttl (the store's clock),
	// so that no other claimer gets them meanwhile; oldest due first.
	ClaimDeliveries(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*DueDelivery, error)
	// RecordDelivery records the outcome of an attempt on a delivery
	// owner claimed and releases the claim. ErrNotFound when the delivery
	// (or its endpoint) went meanwhile.
	RecordDelivery(ctx context.Context, d *WebhookDelivery, owner string, r DeliveryResult) error
}
