-- forge:foreign-keys-off
-- Storage per turn (docs/decisions.md "Store"): no index that repeats a
-- primary key, no column a row can take from its parent.
--
-- messages is clustered on its key (WITHOUT ROWID): its rows are small
-- (the content is in parts), and the separate index a rowid table keeps
-- for a TEXT primary key went.
--
-- parts stays a rowid table (a part holds the content: a rowid table keeps
-- rows of up to a page in the page, where a WITHOUT ROWID one spills any
-- row over a quarter of a page to an overflow page), keyed by the unique
-- index its reads use anyway, (tenant, message_id, id), instead of a
-- primary key on (tenant, id) beside it. session_id and turn_id went:
-- they are its message's.
CREATE TABLE messages_new (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    turn_id    TEXT,
    thread_id  TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    parent_id  TEXT,
    author     TEXT    NOT NULL,
    model      TEXT    NOT NULL,
    finish     TEXT    NOT NULL,
    usage      TEXT,
    summary    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    metadata   TEXT,
    origin     TEXT,
    forum      TEXT,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, turn_id) REFERENCES turns (tenant, id)
) STRICT, WITHOUT ROWID;

INSERT INTO messages_new SELECT tenant, id, session_id, turn_id, thread_id, role, parent_id, author, model, finish,
    usage, summary, created_at, metadata, origin, forum FROM messages;

DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;

CREATE INDEX messages_turn ON messages (tenant, turn_id, id);
CREATE INDEX messages_session ON messages (tenant, session_id, id);
CREATE INDEX messages_loose ON messages (tenant, session_id, id) WHERE turn_id IS NULL;
CREATE UNIQUE INDEX messages_origin ON messages (tenant, session_id, origin) WHERE origin IS NOT NULL;

CREATE TABLE parts_new (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
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
    FOREIGN KEY (tenant, message_id) REFERENCES messages (tenant, id)
) STRICT;

INSERT INTO parts_new SELECT tenant, id, message_id, type, text, state, call_id, tool, arguments, output, error,
    data, provider, created_at, updated_at FROM parts ORDER BY rowid;

DROP TABLE parts;
ALTER TABLE parts_new RENAME TO parts;

CREATE UNIQUE INDEX parts_key ON parts (tenant, message_id, id);
