-- Webhooks (API.md, "Webhooks"): a tenant's endpoints and the outbox.
-- Every event write inserts, in its own transaction, one pending row of
-- webhook_deliveries per endpoint of the tenant subscribed to the event's
-- type (events: a JSON array), with the event's envelope as payload; the
-- dispatcher claims due rows (claimed_until), sends them and records the
-- outcome on the row. n orders an endpoint's deliveries (newest first).
CREATE TABLE webhooks (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    url         TEXT    NOT NULL,
    events      TEXT    NOT NULL,
    description TEXT    NOT NULL DEFAULT '',
    secret      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT, WITHOUT ROWID;

CREATE TABLE webhook_deliveries (
    n               INTEGER PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    webhook_id      TEXT    NOT NULL,
    id              TEXT    NOT NULL,
    session_id      TEXT    NOT NULL,
    seq             INTEGER NOT NULL,
    event_type      TEXT    NOT NULL,
    payload         BLOB    NOT NULL,
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    response_code   INTEGER NOT NULL DEFAULT 0,
    error           TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    last_attempt_at INTEGER,
    next_attempt_at INTEGER,
    claimed_by      TEXT,
    claimed_until   INTEGER,
    UNIQUE (tenant, webhook_id, session_id, seq)
) STRICT;

CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (tenant, webhook_id, n);
