package client

import (
	"context"
	"net/http"

	"github.com/forge-runtime/forge"
)

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description,omitempty"`
}

// CreatedWebhook is a new endpoint with its signing secret (shown once).
type CreatedWebhook struct {
	forge.Webhook
	Secret string `json:"secret"`
}

// CreateWebhook creates an endpoint; keep the returned Secret to verify
// deliveries (webhook.Verify, or any Standard Webhooks library).
func (c *Client) CreateWebhook(ctx context.Context, req CreateWebhookRequest) (*CreatedWebhook, error) {
	var out CreatedWebhook
	if _, err := c.do(ctx, http.MethodPost, "/v1/webhooks", nil, req, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWebhook returns an endpoint (without its secret).
func (c *Client) GetWebhook(ctx context.Context, id string) (*forge.Webhook, error) {
	var out forge.Webhook
	if _, err := c.do(ctx, http.MethodGet, "/v1/webhooks/"+seg(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWebhooks returns a page of endpoints, oldest first.
func (c *Client) ListWebhooks(ctx context.Context, opts ListOptions) (*Page[forge.Webhook], error) {
	return list[forge.Webhook](ctx, c, "/v1/webhooks", opts.query(nil))
}

// DeleteWebhook deletes an endpoint and its deliveries.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/webhooks/"+seg(id), nil, nil, nil, nil)
	return err
}

// ListWebhookDeliveries returns a page of an endpoint's deliveries, newest
// first.
func (c *Client) ListWebhookDeliveries(ctx context.Context, id string, opts ListOptions) (*Page[forge.WebhookDelivery], error) {
	return list[forge.WebhookDelivery](ctx, c, "/v1/webhooks/"+seg(id)+"/deliveries", opts.query(nil))
}
