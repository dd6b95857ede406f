-- Forge schema, version 1.
--
-- Every table carries tenant and every query filters on it. Ids are
-- ULID-shaped (time-sortable), so ordering by id is ordering by creation.
-- Times are Unix nanoseconds (UTC). JSON fields are JSON text. STRICT
-- tables make a Go []byte bound to a TEXT column an error, not a surprise.

CREATE TABLE agents (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL, -- current version
    created_at INTEGER NOT NULL,
    deleted_at INTEGER,
    PRIMARY KEY (tenant, id)
) STRICT;

-- A name is taken only by a live agent: a deleted name can be reused.
CREATE UNIQUE INDEX agents_live_name ON agents (tenant, name) WHERE deleted_at IS NULL;

CREATE TABLE agent_versions (
    tenant     TEXT    NOT NULL,
    agent_id   TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    body       TEXT    NOT NULL, -- the Agent as JSON
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, agent_id, version),
    FOREIGN KEY (tenant, agent_id) REFERENCES agents (tenant, id)
) STRICT;

CREATE TABLE sessions (
    tenant         TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    agent          TEXT    NOT NULL,
    title          TEXT    NOT NULL,
    main_thread_id TEXT    NOT NULL,
    metadata       TEXT,
    tip_turn_id    TEXT,
    -- Upper bound of the seqs handed out by ReserveSeqs; never decreases.
    seq_reserved   INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    deleted_at     INTEGER,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE TABLE turns (
    tenant           TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    session_id       TEXT    NOT NULL,
    previous_turn_id TEXT,
    agent_id         TEXT    NOT NULL,
    agent_version    INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    input            TEXT,
    output           TEXT,
    required_actions TEXT,
    error            TEXT,
    cancel_reason    TEXT,
    usage            TEXT    NOT NULL,
    iterations       INTEGER NOT NULL,
    last_seq         INTEGER NOT NULL,
    idempotency_key  TEXT,
    created_at       INTEGER NOT NULL,
    ended_at         INTEGER,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
) STRICT;

CREATE INDEX turns_session ON turns (tenant, session_id, id);
-- One running turn per session, enforced by the database.
CREATE UNIQUE INDEX turns_one_running ON turns (tenant, session_id) WHERE status = 'running';
CREATE UNIQUE INDEX turns_idempotency ON turns (tenant, session_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE messages (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    turn_id    TEXT    NOT NULL,
    thread_id  TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    parent_id  TEXT,
    author     TEXT    NOT NULL,
    model      TEXT    NOT NULL,
    finish     TEXT    NOT NULL,
    usage      TEXT,
    summary    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, turn_id) REFERENCES turns (tenant, id)
) STRICT;

CREATE INDEX messages_turn ON messages (tenant, turn_id, id);
-- A branch is read by walking the session's messages in id order and
-- keeping those of the branch's turns: a page stops after limit rows.
CREATE INDEX messages_session ON messages (tenant, session_id, id);

CREATE TABLE parts (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    turn_id    TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    text       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    call_id    TEXT    NOT NULL,
    tool       TEXT    NOT NULL,
    arguments  TEXT,
    output     TEXT,
    error      TEXT,
    data       TEXT,
    provider   TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, message_id) REFERENCES messages (tenant, id)
) STRICT;

CREATE INDEX parts_message ON parts (tenant, message_id, id);

-- The persisted event log: append-only, full-row events only.
CREATE TABLE events (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    id         TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    turn_id    TEXT,
    thread_id  TEXT,
    created_at INTEGER NOT NULL,
    data       TEXT,
    PRIMARY KEY (tenant, session_id, seq),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
) STRICT;

-- Replay of one turn without scanning the whole session's log.
CREATE INDEX events_turn ON events (tenant, turn_id, seq) WHERE turn_id IS NOT NULL;

CREATE TABLE snapshots (
    tenant     TEXT    NOT NULL,
    turn_id    TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (tenant, turn_id)
) STRICT;

CREATE TABLE idempotency (
    tenant     TEXT    NOT NULL,
    scope      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    status     INTEGER NOT NULL,
    body       BLOB,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, scope, key)
) STRICT;
