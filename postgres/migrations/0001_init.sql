-- Forge schema for PostgreSQL, version 1.
--
-- Runs as the owner role, with search_path set to the forge schema.
-- {{owner}}, {{runtime}} and {{lookup}} are the names of Forge's roles
-- (see roles.go): the owner owns every object; the runtime role, which
-- every query of the store runs as, may only read and write rows; the
-- lookup role owns the SECURITY DEFINER functions that cross tenants.
--
-- Tenant isolation: every tenant table has row-level security, forced (it
-- applies to the owner too), with a policy that admits only the rows of the
-- tenant set for the current transaction (set_config('forge.tenant', $1,
-- true)). With no tenant set nothing is visible and nothing can be written.
-- Queries still filter on tenant themselves (and use the indexes that
-- start with it); the policies are what catches a query that forgets.
-- tenant <> '' is a constraint: the setting reads '' once a transaction
-- that set it has ended, and no row may ever match that.
--
-- Text columns use the "C" collation: ids and names sort (and page) in
-- byte order, as in SQLite, whatever the database's locale.
--
-- Times are timestamptz (microseconds). JSON fields are text, stored as
-- given. Free text that models, tools and clients produce (part text,
-- output and error, session titles, cancel messages) is bytea: text cannot
-- hold a NUL byte or bytes that are not UTF-8, and Forge keeps what it was
-- given.

CREATE TABLE agents (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id         text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    version    integer          NOT NULL, -- current version
    created_at timestamptz      NOT NULL,
    deleted_at timestamptz,
    PRIMARY KEY (tenant, id)
);

-- A name is taken only by a live agent: a deleted name can be reused.
CREATE UNIQUE INDEX agents_live_name ON agents (tenant, name) WHERE deleted_at IS NULL;

CREATE TABLE agent_versions (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    agent_id   text COLLATE "C" NOT NULL,
    version    integer          NOT NULL,
    body       text COLLATE "C" NOT NULL, -- the Agent as JSON
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, agent_id, version),
    FOREIGN KEY (tenant, agent_id) REFERENCES agents (tenant, id)
);

CREATE TABLE sessions (
    tenant                   text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id                       text COLLATE "C" NOT NULL,
    kind                     text COLLATE "C" NOT NULL,
    agent                    text COLLATE "C" NOT NULL,
    title                    bytea            NOT NULL,
    main_thread_id           text COLLATE "C" NOT NULL,
    metadata                 text COLLATE "C",
    tip_turn_id              text COLLATE "C",
    -- Upper bound of the seqs handed out by ReserveSeqs; never decreases.
    seq_reserved             bigint           NOT NULL DEFAULT 0,
    -- The usage of the session's ended turns, added by each terminal write.
    usage_input_tokens       bigint           NOT NULL DEFAULT 0,
    usage_output_tokens      bigint           NOT NULL DEFAULT 0,
    usage_reasoning_tokens   bigint           NOT NULL DEFAULT 0,
    usage_cache_read_tokens  bigint           NOT NULL DEFAULT 0,
    usage_cache_write_tokens bigint           NOT NULL DEFAULT 0,
    usage_cost               double precision NOT NULL DEFAULT 0,
    created_at               timestamptz      NOT NULL,
    updated_at               timestamptz      NOT NULL,
    deleted_at               timestamptz,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE turns (
    tenant           text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id               text COLLATE "C" NOT NULL,
    session_id       text COLLATE "C" NOT NULL,
    previous_turn_id text COLLATE "C",
    agent_id         text COLLATE "C" NOT NULL,
    agent_version    integer          NOT NULL,
    status           text COLLATE "C" NOT NULL,
    input            text COLLATE "C",
    output           text COLLATE "C",
    required_actions text COLLATE "C",
    error            text COLLATE "C",
    cancel_reason    text COLLATE "C",
    cancel_message   bytea,
    usage            text COLLATE "C" NOT NULL,
    iterations       integer          NOT NULL,
    last_seq         bigint           NOT NULL,
    idempotency_key  text COLLATE "C",
    created_at       timestamptz      NOT NULL,
    ended_at         timestamptz,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
);

CREATE INDEX turns_session ON turns (tenant, session_id, id);
-- One running turn per session, enforced by the database; recovery finds
-- the running turns through it.
CREATE UNIQUE INDEX turns_one_running ON turns (tenant, session_id) WHERE status = 'running';
CREATE UNIQUE INDEX turns_idempotency ON turns (tenant, session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE messages (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id         text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    turn_id    text COLLATE "C" NOT NULL,
    thread_id  text COLLATE "C" NOT NULL,
    role       text COLLATE "C" NOT NULL,
    parent_id  text COLLATE "C",
    author     text COLLATE "C" NOT NULL,
    model      text COLLATE "C" NOT NULL,
    finish     text COLLATE "C" NOT NULL,
    usage      text COLLATE "C",
    summary    boolean          NOT NULL,
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, turn_id) REFERENCES turns (tenant, id)
);

CREATE INDEX messages_turn ON messages (tenant, turn_id, id);
-- A branch is read by walking the session's messages in id order and
-- keeping those of the branch's turns: a page stops after limit rows.
CREATE INDEX messages_session ON messages (tenant, session_id, id);

CREATE TABLE parts (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id         text COLLATE "C" NOT NULL,
    message_id text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    turn_id    text COLLATE "C" NOT NULL,
    type       text COLLATE "C" NOT NULL,
    text       bytea            NOT NULL,
    state      text COLLATE "C" NOT NULL,
    call_id    text COLLATE "C" NOT NULL,
    tool       text COLLATE "C" NOT NULL,
    arguments  text COLLATE "C",
    output     bytea,
    error      bytea,
    data       text COLLATE "C",
    provider   text COLLATE "C",
    created_at timestamptz      NOT NULL,
    updated_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, message_id) REFERENCES messages (tenant, id)
);

CREATE INDEX parts_message ON parts (tenant, message_id, id);

-- The persisted event log: append-only, full-row events only.
CREATE TABLE events (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    session_id text COLLATE "C" NOT NULL,
    seq        bigint           NOT NULL,
    id         text COLLATE "C" NOT NULL,
    type       text COLLATE "C" NOT NULL,
    turn_id    text COLLATE "C",
    thread_id  text COLLATE "C",
    created_at timestamptz      NOT NULL,
    data       text COLLATE "C",
    PRIMARY KEY (tenant, session_id, seq),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
);

-- Replay of one turn without scanning the whole session's log.
CREATE INDEX events_turn ON events (tenant, turn_id, seq) WHERE turn_id IS NOT NULL;

CREATE TABLE snapshots (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    turn_id    text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    body       text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, turn_id)
);

CREATE TABLE idempotency (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    scope      text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    -- request_hash binds the key to the request first made with it;
    -- status 0 means the answer is not recorded yet; expires_at NULL: never.
    request_hash text COLLATE "C" NOT NULL DEFAULT '',
    status     integer          NOT NULL,
    body       bytea,
    created_at timestamptz      NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (tenant, scope, key)
);

-- API keys: only the SHA-256 of a key's secret is stored. key_hash is
-- unique across tenants: a request's key is looked up before its tenant is
-- known (api_key_by_hash below).
CREATE TABLE api_keys (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id         text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    key_hash   bytea            NOT NULL UNIQUE,
    created_at timestamptz      NOT NULL,
    revoked_at timestamptz,
    PRIMARY KEY (tenant, id)
);

-- Row-level security on every tenant table.
DO $$
DECLARE
    t text COLLATE "C" ;
BEGIN
    FOREACH t IN ARRAY ARRAY['agents', 'agent_versions', 'sessions', 'turns', 'messages', 'parts',
                             'events', 'snapshots', 'idempotency', 'api_keys']
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

GRANT USAGE ON SCHEMA forge TO {{runtime}}, {{lookup}};
GRANT SELECT ON schema_migrations TO {{runtime}};

-- Forge's own errors, raised so that a failed check aborts the whole
-- batch it belongs to (the store maps them to forge's sentinels):
--   FG001 the turn already ended (forge.ErrTurnEnded)
--   FG002 not found (forge.ErrNotFound)
--   FG003 conflict (forge.ErrConflict)
--   FG004 the session already has a running turn (forge.ErrTurnInProgress)

-- fenced passes the last_seq a fenced UPDATE of a turn returned, and when
-- it matched nothing (NULL) raises why: the turn ended, or is not there.
CREATE FUNCTION fenced(p_last_seq bigint, p_session text, p_turn text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    st text COLLATE "C" ;
BEGIN
    IF p_last_seq IS NOT NULL THEN
        RETURN p_last_seq;
    END IF;
    SELECT status INTO st FROM forge.turns
        WHERE tenant = current_setting('forge.tenant', true) AND session_id = p_session AND id = p_turn;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'turn % not found', p_turn USING ERRCODE = 'FG002';
    END IF;
    RAISE EXCEPTION 'turn % already ended (%)', p_turn, st USING ERRCODE = 'FG001';
END
$$;

-- begin_turn_check locks the session row (so BeginTurns of one session
-- run one at a time) and checks, in this order, what BeginTurn promises:
-- the session is live, the previous turn is in it, the idempotency key is
-- unused, no turn is running (checked before the tip: a running turn is
-- what moved it), and the tip is the expected one.
CREATE FUNCTION begin_turn_check(p_session text, p_prev text, p_key text, p_running boolean,
                                 p_check_tip boolean, p_tip text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    t   text COLLATE "C" := current_setting('forge.tenant', true);
    tip text COLLATE "C" ;
BEGIN
    SELECT tip_turn_id INTO tip FROM forge.sessions
        WHERE tenant = t AND id = p_session AND deleted_at IS NULL FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'session % not found', p_session USING ERRCODE = 'FG002';
    END IF;
    IF p_prev IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM forge.turns WHERE tenant = t AND session_id = p_session AND id = p_prev) THEN
        RAISE EXCEPTION 'previous turn % not found in session %', p_prev, p_session USING ERRCODE = 'FG002';
    END IF;
    IF p_key IS NOT NULL AND EXISTS (
        SELECT 1 FROM forge.turns WHERE tenant = t AND session_id = p_session AND idempotency_key = p_key) THEN
        RAISE EXCEPTION 'idempotency key "%" was already used in session %', p_key, p_session USING ERRCODE = 'FG003';
    END IF;
    IF p_running AND EXISTS (
        SELECT 1 FROM forge.turns WHERE tenant = t AND session_id = p_session AND status = 'running') THEN
        RAISE EXCEPTION 'session % already has a running turn', p_session USING ERRCODE = 'FG004';
    END IF;
    IF p_check_tip AND coalesce(tip, '') <> p_tip THEN
        RAISE EXCEPTION 'session % tip moved to "%"', p_session, coalesce(tip, '') USING ERRCODE = 'FG003';
    END IF;
END
$$;

REVOKE ALL ON FUNCTION fenced(bigint, text, text), begin_turn_check(text, text, text, boolean, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION fenced(bigint, text, text), begin_turn_check(text, text, text, boolean, boolean, text)
    TO {{runtime}};

-- The two deliberate paths across tenants, both SECURITY DEFINER functions
-- owned by the lookup role. That role can read only the columns they need,
-- and its own policies admit only running turns and live keys, so each
-- function can return no more than its query asks for:
--   running_turns: recovery's list of unfinished turns, as ids only; the
--     store then reads each turn with its tenant set, through the policy.
--   api_key_by_hash, api_keys_exist: authentication, which learns the
--     tenant from the key.
GRANT SELECT (tenant, session_id, id, status) ON turns TO {{lookup}};
GRANT SELECT (tenant, id, name, key_hash, created_at, revoked_at) ON api_keys TO {{lookup}};
CREATE POLICY lookup_running ON turns FOR SELECT TO {{lookup}} USING (status = 'running');
CREATE POLICY lookup_live_keys ON api_keys FOR SELECT TO {{lookup}} USING (revoked_at IS NULL);
-- The owner (an operator: it can alter the tables anyway) sees every key,
-- for `forge keys list` and `forge keys revoke` across tenants.
CREATE POLICY owner_all_keys ON api_keys TO {{owner}} USING (true) WITH CHECK (true);

CREATE FUNCTION running_turns() RETURNS TABLE (tenant text, session_id text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT t.tenant, t.session_id, t.id FROM forge.turns t WHERE t.status = 'running'
    ORDER BY t.tenant, t.session_id
$$;

CREATE FUNCTION api_key_by_hash(p_hash bytea)
RETURNS TABLE (tenant text, id text, name text, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT k.tenant, k.id, k.name, k.created_at FROM forge.api_keys k
    WHERE k.key_hash = p_hash AND k.revoked_at IS NULL
$$;

CREATE FUNCTION api_keys_exist() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT EXISTS (SELECT 1 FROM forge.api_keys k WHERE k.revoked_at IS NULL)
$$;

REVOKE ALL ON FUNCTION running_turns(), api_key_by_hash(bytea), api_keys_exist() FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION running_turns() OWNER TO {{lookup}};
ALTER FUNCTION api_key_by_hash(bytea) OWNER TO {{lookup}};
ALTER FUNCTION api_keys_exist() OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION running_turns(), api_key_by_hash(bytea), api_keys_exist() TO {{runtime}};
