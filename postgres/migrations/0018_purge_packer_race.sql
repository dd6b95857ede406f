-- A deleted session's purge and the event log's packer no longer race.
-- The packer rewrote a turn's packs (event_log_swap) in its own
-- transaction; committed between purge_session's delete of the session's
-- event log and its delete of the session, its new packs made that delete
-- fail the event_log foreign key (seen in CI: PurgeSession failed with
-- SQLSTATE 23503). Now purge_session locks the session's row first (FOR
-- UPDATE), and event_log_swap takes a key-share lock on it, so one waits
-- for the other; the swap leaves a deleted (or purged) session's log as
-- it is: nobody reads it any more, and the purge deletes it.
CREATE OR REPLACE FUNCTION purge_session(p_session text, p_budget integer, OUT deleted integer, OUT files integer, OUT done boolean)
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
    -- Locked: a concurrent event_log_swap waits for this purge (and
    -- then leaves the session alone), or this purge waits for it.
    SELECT deleted_at INTO gone FROM forge.sessions WHERE tenant = t AND id = p_session FOR UPDATE;
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
        RETURNING type, data),
    refs AS (
        SELECT (d.data::jsonb) ->> 'file_id' AS id FROM d WHERE d.type = 'file'
        UNION
        SELECT j ->> 'file_id' FROM d
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN d.type = 'tool' AND jsonb_typeof((d.data::jsonb) -> 'files') = 'array'
            THEN (d.data::jsonb) -> 'files' ELSE '[]'::jsonb END) j)
    SELECT (SELECT count(*) FROM d), (SELECT array_agg(id) FROM refs WHERE id IS NOT NULL)
        INTO n, ids;
    deleted := n; left_ := left_ - n;
    FOR f IN SELECT x.id, x.sha256 FROM forge.files x
            WHERE x.tenant = t AND x.id = ANY (coalesce(ids, '{}'))
            AND NOT EXISTS (SELECT 1 FROM forge.parts r WHERE r.tenant = t AND r.type = 'file'
                AND (r.data::jsonb) ->> 'file_id' = x.id)
            AND NOT EXISTS (SELECT 1 FROM forge.parts r WHERE r.tenant = t AND r.type = 'tool'
                AND ((r.data::jsonb) -> 'files') @> jsonb_build_array(jsonb_build_object('file_id', x.id))) LOOP
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

CREATE OR REPLACE FUNCTION event_log_swap(p_session text, p_turn text, p_olds bigint[],
                               p_firsts bigint[], p_lasts bigint[], p_bodies bytea[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
    n integer;
BEGIN
    PERFORM 1 FROM forge.sessions WHERE tenant = t AND id = p_session AND deleted_at IS NULL FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN; -- deleted: its log is purged, not packed
    END IF;
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
