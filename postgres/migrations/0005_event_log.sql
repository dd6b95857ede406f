-- The event log in packs (internal/eventpack, postgres/events.go): one
-- row per run of a session's events, compressed against the rows they
-- announce, instead of one row per event holding a copy of its row.
-- turn_id is set while the events' turn runs (packed without rows) and
-- NULL once the packer packed them against the turn's rows; the rows of
-- the old log (events) stay and are read beside the packs.
CREATE TABLE event_log (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    session_id text COLLATE "C" NOT NULL,
    first_seq  bigint           NOT NULL,
    last_seq   bigint           NOT NULL,
    turn_id    text COLLATE "C",
    body       bytea            NOT NULL,
    PRIMARY KEY (tenant, session_id, first_seq),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
);

-- The packs still waiting for their turn's end (few at any time).
CREATE INDEX event_log_open ON event_log (tenant, turn_id) WHERE turn_id IS NOT NULL;

ALTER TABLE event_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE event_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON event_log
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
GRANT SELECT, INSERT, DELETE ON event_log TO {{runtime}};

-- A turn's first stored seq: with last_seq, the part of the log a replay
-- of the turn reads.
ALTER TABLE turns ADD COLUMN first_seq bigint;
UPDATE turns SET first_seq = (
    SELECT min(e.seq) FROM events e WHERE e.tenant = turns.tenant AND e.turn_id = turns.id
);

-- event_log_above raises FG003 unless p_first is above every stored seq of
-- the session (and returns true): seqs are assigned in order and never
-- reused, so a lower one is a seq used twice. STABLE: in the INSERT that
-- calls it for each row, it sees the log as it was before the INSERT.
CREATE FUNCTION event_log_above(p_session text, p_first bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    t   text COLLATE "C" := current_setting('forge.tenant', true);
    top bigint;
BEGIN
    SELECT greatest(
        (SELECT last_seq FROM forge.event_log WHERE tenant = t AND session_id = p_session ORDER BY first_seq DESC LIMIT 1),
        (SELECT max(seq) FROM forge.events WHERE tenant = t AND session_id = p_session)) INTO top;
    IF top >= p_first THEN
        RAISE EXCEPTION 'event seq % already exists (the log of session % is at %)', p_first, p_session, top
            USING ERRCODE = 'FG003';
    END IF;
    RETURN true;
END
$$;

-- event_log_swap replaces a turn's packs (first seqs p_olds, still
-- waiting for its end) with their packed form, or raises FG003 if they are
-- not all there any more (packed meanwhile).
CREATE FUNCTION event_log_swap(p_session text, p_turn text, p_olds bigint[],
                               p_firsts bigint[], p_lasts bigint[], p_bodies bytea[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
    n integer;
BEGIN
    DELETE FROM forge.event_log
        WHERE tenant = t AND session_id = p_session AND first_seq = ANY (p_olds) AND turn_id = p_turn;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> cardinality(p_olds) THEN
        RAISE EXCEPTION 'event log of turn % changed while it was packed', p_turn USING ERRCODE = 'FG003';
    END IF;
    INSERT INTO forge.event_log (tenant, session_id, first_seq, last_seq, turn_id, body)
        SELECT t, p_session, u.f, u.l, NULL, u.b FROM unnest(p_firsts, p_lasts, p_bodies) AS u(f, l, b);
END
$$;

REVOKE ALL ON FUNCTION event_log_above(text, bigint), event_log_swap(text, text, bigint[], bigint[], bigint[], bytea[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION event_log_above(text, bigint), event_log_swap(text, text, bigint[], bigint[], bigint[], bytea[])
    TO {{runtime}};

-- unpacked_turns lists, across tenants, the turns whose packs wait (ids
-- only, as running_turns does): after a restart the packer reads each
-- with its tenant set, and packs those that ended.
GRANT SELECT (tenant, session_id, turn_id) ON event_log TO {{lookup}};
CREATE POLICY lookup_open ON event_log FOR SELECT TO {{lookup}} USING (turn_id IS NOT NULL);

CREATE FUNCTION unpacked_turns() RETURNS TABLE (tenant text, session_id text, turn_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT DISTINCT e.tenant, e.session_id, e.turn_id FROM forge.event_log e WHERE e.turn_id IS NOT NULL
$$;

REVOKE ALL ON FUNCTION unpacked_turns() FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION unpacked_turns() OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION unpacked_turns() TO {{runtime}};
