-- Schedules (API.md, "Schedules"): a schedule's next slot is next_run_at
-- (millisecond precision); a replica claims a slot by moving it forward
-- with a compare-and-swap and records the run in the same transaction, so
-- each slot fires once across replicas. A run's slot is unique per
-- schedule. Tenant tables like the others: row security on both.
CREATE TABLE schedules (
    tenant      text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id          text COLLATE "C" NOT NULL,
    agent       text COLLATE "C" NOT NULL,
    cron        text             NOT NULL DEFAULT '',
    every       text COLLATE "C" NOT NULL DEFAULT '',
    timezone    text COLLATE "C" NOT NULL,
    input       text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C",
    catch_up    text COLLATE "C" NOT NULL,
    paused      boolean          NOT NULL DEFAULT false,
    next_run_at timestamptz      NOT NULL,
    created_at  timestamptz      NOT NULL,
    updated_at  timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id)
);
-- The scheduler's poll: live schedules by their next slot.
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE NOT paused;

CREATE TABLE schedule_runs (
    tenant      text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    schedule_id text COLLATE "C" NOT NULL,
    slot        timestamptz      NOT NULL,
    id          text COLLATE "C" NOT NULL,
    fired_at    timestamptz      NOT NULL,
    session_id  text COLLATE "C",
    turn_id     text COLLATE "C",
    status      text COLLATE "C" NOT NULL,
    error       text             NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, schedule_id, slot),
    FOREIGN KEY (tenant, schedule_id) REFERENCES schedules (tenant, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX schedule_runs_id ON schedule_runs (tenant, id);

DO $$
DECLARE
    t text COLLATE "C";
BEGIN
    FOREACH t IN ARRAY ARRAY['schedules', 'schedule_runs']
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

-- The deliberate path across tenants: due_schedules lists the schedules
-- of every tenant whose slot has come, as ids only (like running_turns);
-- the store then reads and claims each with its tenant set, through the
-- ordinary policy. The lookup role may read four columns of schedules.
GRANT SELECT (tenant, id, paused, next_run_at) ON schedules TO {{lookup}};
CREATE POLICY lookup_due ON schedules FOR SELECT TO {{lookup}} USING (NOT paused);

CREATE FUNCTION due_schedules(p_now timestamptz, p_limit integer) RETURNS TABLE (tenant text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT s.tenant, s.id FROM forge.schedules s
    WHERE NOT s.paused AND s.next_run_at <= p_now
    ORDER BY s.next_run_at, s.tenant, s.id
    LIMIT p_limit
$$;
REVOKE ALL ON FUNCTION due_schedules(timestamptz, integer) FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION due_schedules(timestamptz, integer) OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION due_schedules(timestamptz, integer) TO {{runtime}};
