package postgres

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	b := batch(c.Tenant)
	b.Queue(`INSERT INTO webhooks (tenant, id, url, events, description, secret, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, c.Tenant, c.ID, c.URL, c.Events, c.Description, c.Secret, c.CreatedAt)
	if err := s.write(ctx, b); err != nil {
		return err
	}
	*w = c
	return nil
}

const webhookCols = `tenant, id, url, events, description, secret, created_at`

func scanWebhook(r pgx.Row) (*forge.Webhook, error) {
	var w forge.Webhook
	if err := r.Scan(&w.Tenant, &w.ID, &w.URL, &w.Events, &w.Description, &w.Secret, &w.CreatedAt); err != nil {
		return nil, err
	}
	w.CreatedAt = w.CreatedAt.UTC()
	return &w, nil
}

// GetWebhook returns one of tenant's endpoints.
func (s *Store) GetWebhook(ctx context.Context, tenant, id string) (*forge.Webhook, error) {
	var w *forge.Webhook
	b := batch(tenant)
	b.Queue(`SELECT `+webhookCols+` FROM webhooks WHERE tenant = $1 AND id = $2`, tenant, id).
		QueryRow(func(r pgx.Row) (err error) {
			w, err = scanWebhook(r)
			return notFound(err, "webhook %s not found", id)
		})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return w, nil
}

// ListWebhooks lists tenant's endpoints, oldest first; the cursor is the
// last id.
func (s *Store) ListWebhooks(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Webhook, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Webhook
	b := batch(tenant)
	b.Queue(`SELECT `+webhookCols+` FROM webhooks WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`,
		tenant, opts.Cursor, limit+1).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			w, err := scanWebhook(rows)
			if err != nil {
				return err
			}
			out = append(out, w)
		}
		return rows.Err()
	})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(w *forge.Webhook) string { return w.ID })
	return out, next, nil
}

// DeleteWebhook deletes an endpoint; its deliveries go with it (the
// foreign key cascades).
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id string) error {
	b := batch(tenant)
	b.Queue(`DELETE FROM webhooks WHERE tenant = $1 AND id = $2 RETURNING 1`, tenant, id).
		QueryRow(func(r pgx.Row) error {
			var one int
			return notFound(r.Scan(&one), "webhook %s not found", id)
		})
	return s.write(ctx, b)
}

const deliveryCols = `n, tenant, webhook_id, id, session_id, seq, event_type, status, attempts, response_code, error,
	created_at, last_attempt_at, next_attempt_at`

func scanDelivery(r pgx.Row, extra ...any) (*forge.WebhookDelivery, int64, error) {
	var (
		d forge.WebhookDelivery
		n int64
	)
	dest := append([]any{&n, &d.Tenant, &d.WebhookID, &d.ID, &d.SessionID, &d.Seq, &d.EventType, &d.Status,
		&d.Attempts, &d.ResponseCode, &d.Error, &d.CreatedAt, &d.LastAttemptAt, &d.NextAttemptAt}, extra...)
	if err := r.Scan(dest...); err != nil {
		return nil, 0, err
	}
	d.CreatedAt = d.CreatedAt.UTC()
	for _, t := range []*time.Time{d.LastAttemptAt, d.NextAttemptAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return &d, n, nil
}

// ListDeliveries lists an endpoint's deliveries, newest first; the
// cursor is the last row's position.
func (s *Store) ListDeliveries(ctx context.Context, tenant, webhookID string, opts forge.ListOptions) ([]*forge.WebhookDelivery, string, error) {
	before := int64(1<<63 - 1)
	if opts.Cursor != "" {
		n, err := strconv.ParseInt(opts.Cursor, 10, 64)
		if err != nil {
			return nil, "", forge.Errorf(forge.ErrInvalid, "cursor %q is not a cursor of this list", opts.Cursor)
		}
		before = n
	}
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var (
		out []*forge.WebhookDelivery
		ns  = map[*forge.WebhookDelivery]int64{}
	)
	b := batch(tenant)
	b.Queue(`SELECT check_found(EXISTS (SELECT FROM webhooks WHERE tenant = $1 AND id = $2), 'webhook ' || $2 || ' not found')`,
		tenant, webhookID)
	b.Queue(`SELECT `+deliveryCols+` FROM webhook_deliveries
		WHERE tenant = $1 AND webhook_id = $2 AND n < $3 ORDER BY n DESC LIMIT $4`, tenant, webhookID, before, limit+1).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				d, n, err := scanDelivery(rows)
				if err != nil {
					return err
				}
				ns[d] = n
				out = append(out, d)
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(d *forge.WebhookDelivery) string { return strconv.FormatInt(ns[d], 10) })
	return out, next, nil
}

// ClaimDeliveries lists due deliveries across tenants (one definer
// function), then claims them tenant by tenant: a row another claimer
// took meanwhile no longer matches and is left out.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, ttl time.Duration, limit int) ([]*forge.DueDelivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []*forge.DueDelivery
	err := s.byRef(ctx, fmt.Sprintf(`SELECT tenant, n FROM due_webhook_deliveries(%d)`, limit),
		func(b *pgx.Batch, tenant string, ns []string) {
			b.Queue(`UPDATE webhook_deliveries d SET claimed_by = $2, claimed_until = now() + $3
				WHERE d.tenant = $1 AND d.n = ANY($4::text[]::bigint[]) AND d.status = 'pending' AND d.next_attempt_at <= now()
					AND (d.claimed_until IS NULL OR d.claimed_until < now())
				RETURNING `+deliveryCols+`, payload,
					(SELECT url FROM webhooks w WHERE w.tenant = d.tenant AND w.id = d.webhook_id),
					(SELECT secret FROM webhooks w WHERE w.tenant = d.tenant AND w.id = d.webhook_id)`,
				tenant, owner, ttl, ns).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var (
						payload     []byte
						url, secret *string
					)
					d, _, err := scanDelivery(rows, &payload, &url, &secret)
					if err != nil {
						return err
					}
					d.Payload = payload
					due := &forge.DueDelivery{WebhookDelivery: *d}
					if url != nil && secret != nil {
						due.URL, due.Secret = *url, *secret
					}
					out = append(out, due)
				}
				return rows.Err()
			})
		})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RecordDelivery records an attempt's outcome and releases the claim;
// the retry time and the 24 h limit are the database's clock.
func (s *Store) RecordDelivery(ctx context.Context, d *forge.WebhookDelivery, owner string, r forge.DeliveryResult) error {
	retry := r.RetryIn
	if r.Delivered {
		retry = 0
	}
	b := batch(d.Tenant)
	b.Queue(`WITH c AS (
			SELECT CASE WHEN $7::interval > '0s' AND now() + $7::interval - created_at <= $8::interval
				THEN now() + $7::interval END AS next
			FROM webhook_deliveries WHERE tenant = $1 AND webhook_id = $2 AND session_id = $3 AND seq = $4
		)
		UPDATE webhook_deliveries SET attempts = attempts + 1, response_code = $9, error = $10, last_attempt_at = now(),
			next_attempt_at = (SELECT next FROM c),
			status = CASE WHEN $6 THEN 'delivered' WHEN (SELECT next FROM c) IS NOT NULL THEN 'pending' ELSE 'failed' END,
			claimed_by = NULL, claimed_until = NULL
		WHERE tenant = $1 AND webhook_id = $2 AND session_id = $3 AND seq = $4 AND claimed_by = $5 AND status = 'pending'
		RETURNING 1`,
		d.Tenant, d.WebhookID, d.SessionID, d.Seq, owner, r.Delivered, retry, storeutil.MaxWebhookDeliveryAge,
		r.ResponseCode, r.Error).QueryRow(func(row pgx.Row) error {
		var one int
		return notFound(row.Scan(&one), "delivery %s to webhook %s is not claimed by %s", d.ID, d.WebhookID, owner)
	})
	return s.write(ctx, b)
}

// NotifyDeliveries makes a write of this store that committed a webhook
// delivery call f afterwards (the dispatcher's wake: the delivery goes
// out without waiting for a poll, and a write that queued none costs no
// claim of the outbox). f must return quickly; nil stops it.
func (s *Store) NotifyDeliveries(f func()) { s.onDeliveries.Store(&f) }

// queueWebhooks queues, in a write of events of sc's session, the
// deliveries of those that endpoints of the tenant subscribe to. The
// write calls committed once it has committed: it tells NotifyDeliveries'
// func when a delivery was queued.
func (s *Store) queueWebhooks(b *pgx.Batch, sc scope, evs []forge.Event) (committed func(), err error) {
	out, err := storeutil.WebhookOutbox(evs)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		// Most writes (deltas' checkpoints, parts) store no event an
		// endpoint may take: nothing to report, nothing to allocate.
		return func() {}, nil
	}
	// Set while the batch runs, read by committed once the write has
	// returned.
	queued := false
	for _, e := range out {
		b.Queue(`INSERT INTO webhook_deliveries (tenant, webhook_id, id, session_id, seq, event_type, payload,
			status, created_at, next_attempt_at)
			SELECT w.tenant, w.id, $3, $2, $4, $5, $6, 'pending', now(), now() FROM webhooks w
			WHERE w.tenant = $1 AND $5 = ANY(w.events)`,
			sc.tenant, sc.session, e.ID, e.Seq, e.Type, e.Payload).Exec(func(ct pgconn.CommandTag) error {
			queued = queued || ct.RowsAffected() > 0
			return nil
		})
	}
	return func() {
		if f := s.onDeliveries.Load(); queued && f != nil && *f != nil {
			(*f)()
		}
	}, nil
}
