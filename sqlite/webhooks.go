package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var _ forge.WebhookStore = (*Store)(nil)

// CreateWebhook stores a new endpoint.
func (s *Store) CreateWebhook(ctx context.Context, w *forge.Webhook) error {
	c, err := storeutil.NewWebhook(w, s.ids, s.now())
	if err != nil {
		return err
	}
	events, err := json.Marshal(c.Events)
	if err != nil {
		return err
	}
	err = s.write(ctx, func(x *tx) error {
		_, err := x.exec(`INSERT INTO webhooks (tenant, id, url, events, description, secret, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, c.Tenant, c.ID, c.URL, string(events), c.Description, c.Secret, unixNano(c.CreatedAt))
		return dbErr(err)
	})
	if err != nil {
		return err
	}
	*w = c
	return nil
}

const webhookCols = `tenant, id, url, events, description, secret, created_at`

func scanWebhook(sc interface{ Scan(...any) error }) (*forge.Webhook, error) {
	var (
		w       forge.Webhook
		events  string
		created int64
	)
	if err := sc.Scan(&w.Tenant, &w.ID, &w.URL, &events, &w.Description, &w.Secret, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return nil, err
	}
	w.CreatedAt = fromNano(created)
	return &w, nil
}

// GetWebhook returns one of tenant's endpoints.
func (s *Store) GetWebhook(ctx context.Context, tenant, id string) (*forge.Webhook, error) {
	w, err := scanWebhook(s.queryRow(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE tenant = ? AND id = ?`, tenant, id))
	if err != nil {
		return nil, notFound(err, "webhook %s not found", id)
	}
	return w, nil
}

// ListWebhooks lists tenant's endpoints, oldest first; the cursor is the
// last id.
func (s *Store) ListWebhooks(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Webhook, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	rows, err := s.query(ctx, `SELECT `+webhookCols+` FROM webhooks WHERE tenant = ? AND id > ? ORDER BY id LIMIT ?`,
		tenant, opts.Cursor, limit+1)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var out []*forge.Webhook
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, "", dbErr(err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	out, next := storeutil.Page(out, limit, func(w *forge.Webhook) string { return w.ID })
	return out, next, nil
}

// DeleteWebhook deletes an endpoint and its deliveries.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id string) error {
	return s.write(ctx, func(x *tx) error {
		var one int
		err := x.queryRow(`DELETE FROM webhooks WHERE tenant = ? AND id = ? RETURNING 1`, tenant, id).Scan(&one)
		if err != nil {
			return notFound(err, "webhook %s not found", id)
		}
		_, err = x.exec(`DELETE FROM webhook_deliveries WHERE tenant = ? AND webhook_id = ?`, tenant, id)
		return dbErr(err)
	})
}

const deliveryCols = `n, tenant, webhook_id, id, session_id, seq, event_type, status, attempts, response_code, error,
	created_at, last_attempt_at, next_attempt_at`

func scanDelivery(sc interface{ Scan(...any) error }, extra ...any) (*forge.WebhookDelivery, int64, error) {
	var (
		d             forge.WebhookDelivery
		n, created    int64
		last, nextAtt sql.NullInt64
	)
	dest := append([]any{&n, &d.Tenant, &d.WebhookID, &d.ID, &d.SessionID, &d.Seq, &d.EventType, &d.Status,
		&d.Attempts, &d.ResponseCode, &d.Error, &created, &last, &nextAtt}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return nil, 0, err
	}
	d.CreatedAt, d.LastAttemptAt, d.NextAttemptAt = fromNano(created), fromNullNano(last), fromNullNano(nextAtt)
	return &d, n, nil
}

// ListDeliveries lists an endpoint's deliveries, newest first; the
// cursor is the last row's position.
func (s *Store) ListDeliveries(ctx context.Context, tenant, webhookID string, opts forge.ListOptions) ([]*forge.WebhookDelivery, string, error) {
	if _, err := s.GetWebhook(ctx, tenant, webhookID); err != nil {
		return nil, "", err
	}
	before := int64(1<<63 - 1)
	if opts.Cursor != "" {
		n, err := strconv.ParseInt(opts.Cursor, 10, 64)
		if err != nil {
			return nil, "", forge.Errorf(forge.ErrInvalid, "cursor %q is not a cursor of this list", opts.Cursor)
		}
		before = n
	}
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	rows, err := s.query(ctx, `SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE tenant = ? AND webhook_id = ? AND n < ? ORDER BY n DESC LIMIT ?`, tenant, webhookID, before, limit+1)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var (
		out []*forge.WebhookDelivery
		ns  = map[*forge.WebhookDelivery]int64{}
	)
	for rows.Next() {
		d, n, err := scanDelivery(rows)
		if err != nil {
			return nil, "", dbErr(err)
		}
		ns[d] = n
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	out, next := storeutil.Page(out, limit, func(d *forge.WebhookDelivery) string { return strconv.FormatInt(ns[d], 10) })
	return out, next, nil
}

// ClaimDeliveries claims due deliveries of every tenant.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*forge.DueDelivery, error) {
	now := s.now()
	var out []*forge.DueDelivery
	err := s.write(ctx, func(x *tx) error {
		out = out[:0]
		rows, err := x.query(`UPDATE webhook_deliveries SET claimed_by = ?1, claimed_until = ?2
			WHERE n IN (SELECT n FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= ?3
				AND (claimed_until IS NULL OR claimed_until < ?3) ORDER BY next_attempt_at LIMIT ?4)
			RETURNING `+deliveryCols+`, payload,
				(SELECT url FROM webhooks w WHERE w.tenant = webhook_deliveries.tenant AND w.id = webhook_deliveries.webhook_id),
				(SELECT secret FROM webhooks w WHERE w.tenant = webhook_deliveries.tenant AND w.id = webhook_deliveries.webhook_id)`,
			owner, unixNano(now.Add(ttl)), unixNano(now), limit)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				payload     []byte
				url, secret sql.NullString
			)
			d, _, err := scanDelivery(rows, &payload, &url, &secret)
			if err != nil {
				return dbErr(err)
			}
			d.Payload = payload
			out = append(out, &forge.DueDelivery{WebhookDelivery: *d, URL: url.String, Secret: secret.String})
		}
		return dbErr(rows.Err())
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RecordDelivery records an attempt's outcome and releases the claim.
func (s *Store) RecordDelivery(ctx context.Context, d *forge.WebhookDelivery, owner string, r forge.DeliveryResult) error {
	now := s.now()
	next := storeutil.NextDeliveryAttempt(r, d.CreatedAt, now)
	status := storeutil.DeliveryStatus(r, next)
	var nextAt any
	if next != nil {
		nextAt = unixNano(*next)
	}
	return s.write(ctx, func(x *tx) error {
		var one int
		err := x.queryRow(`UPDATE webhook_deliveries SET status = ?, attempts = attempts + 1, response_code = ?, error = ?,
			last_attempt_at = ?, next_attempt_at = ?, claimed_by = NULL, claimed_until = NULL
			WHERE tenant = ? AND webhook_id = ? AND session_id = ? AND seq = ? AND claimed_by = ? AND status = 'pending'
			RETURNING 1`,
			status, r.ResponseCode, r.Error, unixNano(now), nextAt, d.Tenant, d.WebhookID, d.SessionID, d.Seq, owner).Scan(&one)
		return notFound(err, "delivery %s to webhook %s is not claimed by %s", d.ID, d.WebhookID, owner)
	})
}

// queueWebhooks writes, in a write of events of sc's session, the
// deliveries of those that endpoints of the tenant subscribe to.
func (s *Store) queueWebhooks(x *tx, sc scope, evs []forge.Event) error {
	out, err := storeutil.WebhookOutbox(evs)
	if err != nil || len(out) == 0 {
		return err
	}
	now := unixNano(s.now())
	for _, e := range out {
		_, err := x.exec(`INSERT INTO webhook_deliveries (tenant, webhook_id, id, session_id, seq, event_type, payload,
			status, created_at, next_attempt_at)
			SELECT w.tenant, w.id, ?, ?, ?, ?, ?, 'pending', ?, ? FROM webhooks w
			WHERE w.tenant = ? AND EXISTS (SELECT 1 FROM json_each(w.events) WHERE value = ?)`,
			e.ID, sc.session, e.Seq, e.Type, e.Payload, now, now, sc.tenant, e.Type)
		if err != nil {
			return dbErr(err)
		}
	}
	return nil
}
