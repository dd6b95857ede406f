-- Forums (API.md "Forums"): participant stints, messages outside turns,
-- message metadata, forum settings and monologue turn triggers.

-- Messages that belong to no turn (forum messages, copies ingested into
-- monologues) have turn_id NULL; their parts have turn_id ''.
ALTER TABLE messages ALTER COLUMN turn_id DROP NOT NULL;
-- metadata: the message's metadata (JSON). origin makes a turnless message
-- unique in its session (a retried delivery copies nothing twice). forum:
-- a forum message's forum fields (JSON).
ALTER TABLE messages ADD COLUMN metadata text COLLATE "C";
ALTER TABLE messages ADD COLUMN origin text COLLATE "C";
ALTER TABLE messages ADD COLUMN forum text COLLATE "C";
CREATE INDEX messages_loose ON messages (tenant, session_id, id) WHERE turn_id IS NULL;
CREATE UNIQUE INDEX messages_origin ON messages (tenant, session_id, origin) WHERE origin IS NOT NULL;

ALTER TABLE sessions ADD COLUMN settings text COLLATE "C";
ALTER TABLE turns ADD COLUMN trigger text COLLATE "C";

CREATE TABLE participants (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id         text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL, -- the forum
    actor_type text COLLATE "C" NOT NULL,
    actor_id   text COLLATE "C" NOT NULL, -- human:<id> or agent:<name>
    actor      text COLLATE "C" NOT NULL, -- the Actor as JSON
    trigger    text COLLATE "C" NOT NULL,
    monologue_id text COLLATE "C",        -- metadata.monologue_id
    joined_at  timestamptz      NOT NULL,
    left_at    timestamptz,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
);

CREATE INDEX participants_forum ON participants (tenant, session_id, id);
-- One active stint per actor per forum, enforced by the database.
CREATE UNIQUE INDEX participants_one_active ON participants (tenant, session_id, actor_id) WHERE left_at IS NULL;

ALTER TABLE participants ENABLE ROW LEVEL SECURITY;
ALTER TABLE participants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON participants
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON participants TO {{runtime}};

-- Startup finds the active agent stints of every tenant through this
-- SECURITY DEFINER function (ids only, like running_turns); the stints are
-- then read tenant by tenant through the ordinary policy.
GRANT SELECT (tenant, id, actor_type, left_at) ON participants TO {{lookup}};
CREATE POLICY lookup_active_agents ON participants FOR SELECT TO {{lookup}}
    USING (left_at IS NULL AND actor_type = 'agent');

CREATE FUNCTION active_agent_stints() RETURNS TABLE (tenant text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT p.tenant, p.id FROM forge.participants p WHERE p.left_at IS NULL AND p.actor_type = 'agent'
    ORDER BY p.tenant, p.id
$$;

REVOKE ALL ON FUNCTION active_agent_stints() FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION active_agent_stints() OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION active_agent_stints() TO {{runtime}};

-- Checks that abort the whole batch they belong to when ok is false:
-- FG002 (forge.ErrNotFound) and FG003 (forge.ErrConflict), with msg.
CREATE FUNCTION check_found(p_ok boolean, p_msg text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT p_ok THEN
        RAISE EXCEPTION '%', p_msg USING ERRCODE = 'FG002';
    END IF;
END
$$;

CREATE FUNCTION check_conflict(p_ok boolean, p_msg text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT p_ok THEN
        RAISE EXCEPTION '%', p_msg USING ERRCODE = 'FG003';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION check_found(boolean, text), check_conflict(boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION check_found(boolean, text), check_conflict(boolean, text) TO {{runtime}};
