-- Webhooks (API.md, "Webhooks"): a tenant's endpoints and the outbox.
-- Every event write inserts, in its own transaction, one pending row of
-- webhook_deliveries per endpoint of the tenant subscribed to the event's
-- type, with the event's envelope as payload; dispatchers claim due rows
-- (claimed_until, the database's clock) and record each attempt's outcome
-- on the row. n orders an endpoint's deliveries (newest first).
CREATE TABLE webhooks (
    tenant      text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id          text COLLATE "C" NOT NULL,
    url         text             NOT NULL,
    events      text[]           NOT NULL,
    description text             NOT NULL DEFAULT '',
    secret      text             NOT NULL,
    created_at  timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE webhook_deliveries (
    n               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    webhook_id      text COLLATE "C" NOT NULL,
    id              text COLLATE "C" NOT NULL,
    session_id      text COLLATE "C" NOT NULL,
    seq             bigint           NOT NULL,
    event_type      text COLLATE "C" NOT NULL,
    payload         bytea            NOT NULL,
    status          text COLLATE "C" NOT NULL,
    attempts        integer          NOT NULL DEFAULT 0,
    response_code   integer          NOT NULL DEFAULT 0,
    error           text             NOT NULL DEFAULT '',
    created_at      timestamptz      NOT NULL,
    last_attempt_at timestamptz,
    next_attempt_at timestamptz,
    claimed_by      text COLLATE "C",
    claimed_until   timestamptz,
    UNIQUE (tenant, webhook_id, session_id, seq),
    FOREIGN KEY (tenant, webhook_id) REFERENCES webhooks (tenant, id) ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (tenant, webhook_id, n);

DO $$
DECLARE
    t text COLLATE "C";
BEGIN
    FOREACH t IN ARRAY ARRAY['webhooks', 'webhook_deliveries']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format($p$CREATE POLICY tenant_isolation ON %I
            USING (tenant = current_setting('forge.tenant', true))
            WITH CHECK (tenant = current_setting('forge.tenant', true))$p$, t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO {{runtime}}', t);
    END LOOP;
END
$$;

-- The deliberate path across tenants: due_webhook_deliveries lists the
-- pending deliveries that are due and unclaimed, as (tenant, n) only; the
-- store then claims them tenant by tenant through the ordinary policy.
GRANT SELECT (tenant, n, status, next_attempt_at, claimed_until) ON webhook_deliveries TO {{lookup}};
CREATE POLICY lookup_deliveries ON webhook_deliveries FOR SELECT TO {{lookup}} USING (true);

CREATE FUNCTION due_webhook_deliveries(p_limit integer) RETURNS TABLE (tenant text, n text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT d.tenant, d.n::text FROM forge.webhook_deliveries d
    WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND (d.claimed_until IS NULL OR d.claimed_until < now())
    ORDER BY d.next_attempt_at LIMIT p_limit
$$;
REVOKE ALL ON FUNCTION due_webhook_deliveries(integer) FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION due_webhook_deliveries(integer) OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION due_webhook_deliveries(integer) TO {{runtime}};
