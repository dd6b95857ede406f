-- delete_session soft-deletes a live session unless a turn of it is
-- running (FG002 when there is no live session, FG004 while a turn runs).
-- It locks the session row first, as begin_turn_check does, so the two
-- are ordered: a BeginTurn in flight commits before the check below, which
-- (a new statement, a new snapshot) then sees its turn; a BeginTurn after
-- the delete finds the session deleted. A deleted session thus never has a
-- running turn.
CREATE FUNCTION delete_session(p_session text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
BEGIN
    PERFORM 1 FROM forge.sessions
        WHERE tenant = t AND id = p_session AND deleted_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % not found', p_session USING ERRCODE = 'FG002';
    END IF;
    IF EXISTS (SELECT 1 FROM forge.turns WHERE tenant = t AND session_id = p_session AND status = 'running') THEN
        RAISE EXCEPTION 'session % has a running turn; cancel it before deleting the session', p_session
            USING ERRCODE = 'FG004';
    END IF;
    UPDATE forge.sessions SET deleted_at = p_now WHERE tenant = t AND id = p_session;
END
$$;
REVOKE ALL ON FUNCTION delete_session(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION delete_session(text, timestamptz) TO {{runtime}};
