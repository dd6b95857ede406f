-- Retention (API.md, "Retention and listing"): the sweeper expires idle
-- direct sessions (a soft delete, as DELETE /v1/sessions/{id} does) and
-- purges soft-deleted ones in short transactions (purge_session). An
-- agent's session TTL is a column so that the query can compare it
-- (nanoseconds; NULL: the server's default).
ALTER TABLE agents ADD COLUMN session_ttl bigint;

CREATE INDEX sessions_idle ON sessions (updated_at) WHERE deleted_at IS NULL AND kind = 'direct';
CREATE INDEX sessions_deleted ON sessions (deleted_at) WHERE deleted_at IS NOT NULL;
CREATE INDEX schedules_session ON schedules (tenant, session_id) WHERE session_id IS NOT NULL;
-- Whether a message still references a file once a purged session's
-- parts are gone; only file parts are in it.
CREATE INDEX parts_file ON parts (tenant, ((data::jsonb) ->> 'file_id')) WHERE type = 'file';

-- The paths across tenants, as ids only (like running_turns): the lookup
-- role may read the columns they compare, and the store then expires and
-- purges each session with its tenant set, through the ordinary policy.
GRANT SELECT (tenant, id, kind, agent, updated_at, deleted_at) ON sessions TO {{lookup}};
CREATE POLICY lookup_retention ON sessions FOR SELECT TO {{lookup}} USING (true);
GRANT SELECT (tenant, name, deleted_at, session_ttl) ON agents TO {{lookup}};
CREATE POLICY lookup_retention ON agents FOR SELECT TO {{lookup}} USING (true);
GRANT SELECT (session_id) ON schedules TO {{lookup}};
CREATE POLICY lookup_retention ON schedules FOR SELECT TO {{lookup}} USING (session_id IS NOT NULL);

CREATE FUNCTION shortest_session_ttl() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT min(a.session_ttl) FROM forge.agents a WHERE a.deleted_at IS NULL AND a.session_ttl > 0
$$;

-- p_floor bounds the walk of sessions_idle (the shortest TTL in force);
-- p_older_than, when above zero, replaces every TTL (forge prune).
CREATE FUNCTION expired_sessions(p_now timestamptz, p_floor timestamptz, p_older_than bigint, p_default bigint,
    p_limit integer) RETURNS TABLE (tenant text, id text, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT s.tenant, s.id, s.updated_at FROM forge.sessions s
    LEFT JOIN forge.agents a ON a.tenant = s.tenant AND a.name = s.agent AND a.deleted_at IS NULL
    WHERE s.deleted_at IS NULL AND s.kind = 'direct' AND s.updated_at < p_floor
        AND (p_older_than > 0 OR coalesce(a.session_ttl, p_default) > 0)
        AND s.updated_at < p_now - make_interval(secs => (CASE WHEN p_older_than > 0 THEN p_older_than
            ELSE coalesce(a.session_ttl, p_default) END) / 1e9)
        AND NOT EXISTS (SELECT 1 FROM forge.turns t WHERE t.tenant = s.tenant AND t.session_id = s.id
            AND t.status IN ('running', 'queued'))
        AND NOT EXISTS (SELECT 1 FROM forge.schedules c WHERE c.tenant = s.tenant AND c.session_id = s.id)
    ORDER BY s.updated_at LIMIT p_limit
$$;

CREATE FUNCTION deleted_sessions(p_before timestamptz, p_limit integer) RETURNS TABLE (tenant text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT s.tenant, s.id FROM forge.sessions s WHERE s.deleted_at IS NOT NULL AND s.deleted_at < p_before
    ORDER BY s.deleted_at LIMIT p_limit
$$;

REVOKE ALL ON FUNCTION shortest_session_ttl(), expired_sessions(timestamptz, timestamptz, bigint, bigint, integer),
    deleted_sessions(timestamptz, integer) FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION shortest_session_ttl() OWNER TO {{lookup}};
ALTER FUNCTION expired_sessions(timestamptz, timestamptz, bigint, bigint, integer) OWNER TO {{lookup}};
ALTER FUNCTION deleted_sessions(timestamptz, integer) OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION shortest_session_ttl(), expired_sessions(timestamptz, timestamptz, bigint, bigint, integer),
    deleted_sessions(timestamptz, integer) TO {{runtime}};

-- expire_session soft-deletes a session of the current tenant that is
-- still idle (FG002 when there is no live session, FG003 when a turn
-- began since or runs or waits). It locks the session row first, as
-- delete_session and begin_turn_check do: a racing BeginTurn either
-- committed before (the check sees its turn or its update) or finds the
-- session deleted.
CREATE FUNCTION expire_session(p_session text, p_idle_before timestamptz, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
    updated timestamptz;
BEGIN
    SELECT updated_at INTO updated FROM forge.sessions
        WHERE tenant = t AND id = p_session AND deleted_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % not found', p_session USING ERRCODE = 'FG002';
    END IF;
    IF updated >= p_idle_before OR EXISTS (SELECT 1 FROM forge.turns WHERE tenant = t AND session_id = p_session
            AND status IN ('running', 'queued')) THEN
        RAISE EXCEPTION 'session % is in use again; it is not expired', p_session USING ERRCODE = 'FG003';
    END IF;
    UPDATE forge.sessions SET deleted_at = p_now WHERE tenant = t AND id = p_session;
END
$$;

-- purge_session hard-deletes up to about p_budget rows of a soft-deleted
-- session of the current tenant, children before parents (each table only
-- once the one before it has nothing left of the session), and the files
-- only its parts referenced, the blob row locked as DeleteFile locks it.
-- It runs with the caller's rights: the tenant policy applies throughout.
CREATE FUNCTION purge_session(p_session text, p_budget integer, OUT deleted integer, OUT files integer, OUT done boolean)
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
    gone timestamptz;
    left_ integer := greatest(p_budget, 1);
    n integer;
    ids text[];
    f record;
BEGIN
    deleted := 0; files := 0; done := false;
    SELECT deleted_at INTO gone FROM forge.sessions WHERE tenant = t AND id = p_session;
    IF NOT FOUND THEN
        done := true; -- purged already
        RETURN;
    END IF;
    IF gone IS NULL THEN
        RAISE EXCEPTION 'session % is live: only a deleted session is purged', p_session USING ERRCODE = 'FG005';
    END IF;

    WITH d AS (
        DELETE FROM forge.parts WHERE tenant = t AND id IN (
            -- Each message's parts by parts_message (LATERAL, OFFSET 0),
            -- whatever the statistics: never a walk of the tenant's parts.
            SELECT p.id FROM forge.messages m
            CROSS JOIN LATERAL (SELECT id FROM forge.parts WHERE tenant = t AND message_id = m.id OFFSET 0) p
            WHERE m.tenant = t AND m.session_id = p_session LIMIT left_)
        RETURNING type, data)
    SELECT count(*), array_agg(DISTINCT (d.data::jsonb) ->> 'file_id') FILTER (WHERE d.type = 'file')
        INTO n, ids FROM d;
    deleted := n; left_ := left_ - n;
    FOR f IN SELECT x.id, x.sha256 FROM forge.files x
            WHERE x.tenant = t AND x.id = ANY (coalesce(ids, '{}'))
            AND NOT EXISTS (SELECT 1 FROM forge.parts r WHERE r.tenant = t AND r.type = 'file'
                AND (r.data::jsonb) ->> 'file_id' = x.id) LOOP
        PERFORM 1 FROM forge.file_blobs WHERE tenant = t AND sha256 = f.sha256 FOR UPDATE;
        DELETE FROM forge.files WHERE tenant = t AND id = f.id;
        DELETE FROM forge.file_chunks WHERE tenant = t AND sha256 = f.sha256
            AND NOT EXISTS (SELECT 1 FROM forge.files WHERE tenant = t AND sha256 = f.sha256);
        DELETE FROM forge.file_blobs WHERE tenant = t AND sha256 = f.sha256
            AND NOT EXISTS (SELECT 1 FROM forge.files WHERE tenant = t AND sha256 = f.sha256);
        files := files + 1;
    END LOOP;

    IF left_ > 0 THEN
        DELETE FROM forge.messages WHERE tenant = t AND id IN (
            SELECT id FROM forge.messages WHERE tenant = t AND session_id = p_session LIMIT left_);
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
    END IF;
    IF left_ > 0 THEN
        DELETE FROM forge.snapshots WHERE tenant = t AND turn_id IN (
            SELECT s.turn_id FROM forge.turns u
            CROSS JOIN LATERAL (SELECT turn_id FROM forge.snapshots WHERE tenant = t AND turn_id = u.id OFFSET 0) s
            WHERE u.tenant = t AND u.session_id = p_session LIMIT left_);
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
    END IF;
    IF left_ > 0 THEN
        DELETE FROM forge.events WHERE tenant = t AND session_id = p_session AND seq IN (
            SELECT seq FROM forge.events WHERE tenant = t AND session_id = p_session LIMIT left_);
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
    END IF;
    IF left_ > 0 THEN
        DELETE FROM forge.event_log WHERE tenant = t AND session_id = p_session AND first_seq IN (
            SELECT first_seq FROM forge.event_log WHERE tenant = t AND session_id = p_session LIMIT left_);
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
    END IF;
    IF left_ > 0 THEN
        DELETE FROM forge.participants WHERE tenant = t AND session_id = p_session;
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
        DELETE FROM forge.turn_leases WHERE tenant = t AND turn_id IN (
            SELECT id FROM forge.turns WHERE tenant = t AND session_id = p_session);
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
        -- Deliveries still pending go out first: the event happened.
        DELETE FROM forge.webhook_deliveries WHERE tenant = t AND webhook_id IN (
            SELECT id FROM forge.webhooks WHERE tenant = t) AND session_id = p_session AND status <> 'pending';
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
    END IF;
    IF left_ > 0 THEN
        -- A session's turns go in one statement: they chain to each other.
        DELETE FROM forge.turns WHERE tenant = t AND session_id = p_session;
        GET DIAGNOSTICS n = ROW_COUNT; deleted := deleted + n; left_ := left_ - n;
    END IF;
    IF left_ > 0 THEN
        DELETE FROM forge.sessions WHERE tenant = t AND id = p_session;
        deleted := deleted + 1;
        done := true;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION expire_session(text, timestamptz, timestamptz), purge_session(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION expire_session(text, timestamptz, timestamptz), purge_session(text, integer) TO {{runtime}};
