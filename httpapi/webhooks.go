package httpapi

import (
	"context"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// WebhookURLChecker vets the URL of a new endpoint: what it may reach
// (webhook.URLChecker, configured with --allow-private-webhooks).
type WebhookURLChecker interface {
	CheckURL(ctx context.Context, raw string) error
}

// maxWebhookDescription bounds an endpoint's description (runes).
const maxWebhookDescription = 1024

type webhookBody struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
}

// createdWebhook is the answer to the creation: the only one that shows
// the secret.
type createdWebhook struct {
	*forge.Webhook
	Secret string `json:"secret"`
}

func (s *Server) webhookStore() (forge.WebhookStore, error) {
	if s.webhooks == nil {
		return nil, forge.Errorf(errNotImplemented, "this server's store keeps no webhooks")
	}
	return s.webhooks, nil
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.webhookStore()
	if err != nil {
		return err
	}
	var body webhookBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.URL == nil || strings.TrimSpace(*body.URL) == "" {
		return invalid("url is required: where the events are POSTed")
	}
	if utf8.RuneCountInString(body.Description) > maxWebhookDescription {
		return invalid("description is longer than %d characters", maxWebhookDescription)
	}
	if s.webhookURLs == nil {
		return forge.Errorf(errNotImplemented, "this server delivers no webhooks")
	}
	if err := s.webhookURLs.CheckURL(r.Context(), *body.URL); err != nil {
		return err
	}
	hook := &forge.Webhook{Tenant: tenantOf(r), URL: *body.URL, Events: body.Events, Description: body.Description}
	if err := ws.CreateWebhook(r.Context(), hook); err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/webhooks/"+hook.ID)
	writeJSON(w, http.StatusCreated, createdWebhook{Webhook: hook, Secret: hook.Secret})
	return nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.webhookStore()
	if err != nil {
		return err
	}
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	list, next, err := ws.ListWebhooks(r.Context(), tenantOf(r), opts)
	if err != nil {
		return err
	}
	writeList(w, list, next)
	return nil
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.webhookStore()
	if err != nil {
		return err
	}
	hook, err := ws.GetWebhook(r.Context(), tenantOf(r), r.PathValue("whid"))
	if err != nil {
		return notFound(err, "webhook", r.PathValue("whid"))
	}
	writeJSON(w, http.StatusOK, hook)
	return nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.webhookStore()
	if err != nil {
		return err
	}
	if err := ws.DeleteWebhook(r.Context(), tenantOf(r), r.PathValue("whid")); err != nil {
		return notFound(err, "webhook", r.PathValue("whid"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listWebhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	ws, err := s.webhookStore()
	if err != nil {
		return err
	}
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	list, next, err := ws.ListDeliveries(r.Context(), tenantOf(r), r.PathValue("whid"), opts)
	if err != nil {
		return notFound(err, "webhook", r.PathValue("whid"))
	}
	writeList(w, list, next)
	return nil
}
