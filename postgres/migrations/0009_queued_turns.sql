-- Busy sessions (API.md): a turn asked for with if_busy enqueue while
-- another runs waits as a row of status 'queued' holding the request it
-- will start with (the engine's encoding). Starting it (BeginTurn with
-- Promote) replaces the row with the running turn in one transaction
-- (promote_queued, then begin_turn_check and the unique index
-- turns_one_running), so one replica starts it, once, in order.
ALTER TABLE turns ADD COLUMN queued_request text;
CREATE INDEX turns_queued ON turns (tenant, session_id, created_at, id) WHERE status = 'queued';

-- promote_queued locks the session row (as begin_turn_check does, so the
-- BeginTurns of a session run one at a time), then deletes the queued row
-- of p_turn: FG002 when the session is not live, FG001 (ErrTurnEnded)
-- when the turn is no longer queued, FG003 (conflict) when an older turn
-- of the session is still queued.
CREATE FUNCTION promote_queued(p_session text, p_turn text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t       text COLLATE "C" := current_setting('forge.tenant', true);
    created timestamptz;
BEGIN
    PERFORM 1 FROM forge.sessions WHERE tenant = t AND id = p_session AND deleted_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % not found', p_session USING ERRCODE = 'FG002';
    END IF;
    DELETE FROM forge.turns WHERE tenant = t AND session_id = p_session AND id = p_turn AND status = 'queued'
        RETURNING created_at INTO created;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'turn % is no longer queued', p_turn USING ERRCODE = 'FG001';
    END IF;
    IF EXISTS (SELECT 1 FROM forge.turns WHERE tenant = t AND session_id = p_session AND status = 'queued'
               AND (created_at, id) < (created, p_turn)) THEN
        RAISE EXCEPTION 'an older turn of session % is still queued', p_session USING ERRCODE = 'FG003';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION promote_queued(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION promote_queued(text, text) TO {{runtime}};

-- queued_sessions: the sweep's list, across tenants, of the oldest queued
-- turn of each session with no running turn, as ids only (like
-- running_turns); the lookup role sees queued turns for it, no more.
GRANT SELECT (created_at) ON turns TO {{lookup}};
CREATE POLICY lookup_queued ON turns FOR SELECT TO {{lookup}} USING (status = 'queued');
CREATE FUNCTION queued_sessions() RETURNS TABLE (tenant text, session_id text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT DISTINCT ON (q.tenant, q.session_id) q.tenant, q.session_id, q.id FROM forge.turns q
    WHERE q.status = 'queued' AND NOT EXISTS (
        SELECT 1 FROM forge.turns r WHERE r.tenant = q.tenant AND r.session_id = q.session_id AND r.status = 'running')
    ORDER BY q.tenant, q.session_id, q.created_at, q.id
$$;
REVOKE ALL ON FUNCTION queued_sessions() FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION queued_sessions() OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION queued_sessions() TO {{runtime}};
