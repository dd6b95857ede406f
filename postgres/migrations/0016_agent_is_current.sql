-- A turn prepared from a cached agent row (AgentForTurn) begins only while
-- that version is still the live agent's current one (BeginTurn.AgentName):
-- another replica may have updated or deleted the agent since. Raised as
-- FG006 (ErrConflict, told apart from a moved tip so that the replica
-- forgets only the agent it cached), which undoes the BeginTurn batch it
-- rides in; the replica then reads the agent afresh and retries.
CREATE FUNCTION agent_is_current(p_name text, p_id text, p_version integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t text COLLATE "C" := current_setting('forge.tenant', true);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM forge.agents
            WHERE tenant = t AND name = p_name AND deleted_at IS NULL AND id = p_id AND version = p_version) THEN
        RAISE EXCEPTION 'agent "%" changed since the turn was prepared', p_name USING ERRCODE = 'FG006';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION agent_is_current(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent_is_current(text, text, integer) TO {{runtime}};
