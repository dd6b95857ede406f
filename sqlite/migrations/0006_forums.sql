-- forge:foreign-keys-off
-- Forums (API.md "Forums"): participant stints, messages outside turns,
-- message metadata, forum settings and monologue turn triggers.

-- Messages that belong to no turn (forum messages, copies ingested into
-- monologues) have turn_id NULL: the table is rebuilt to drop NOT NULL.
-- origin makes such a message unique in its session (a retried delivery
-- copies nothing twice); forum holds a forum message's forum fields.
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
) STRICT;

INSERT INTO messages_new (tenant, id, session_id, turn_id, thread_id, role, parent_id, author, model, finish,
    usage, summary, created_at)
SELECT tenant, id, session_id, turn_id, thread_id, role, parent_id, author, model, finish, usage, summary, created_at
FROM messages;

DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;

CREATE INDEX messages_turn ON messages (tenant, turn_id, id);
CREATE INDEX messages_session ON messages (tenant, session_id, id);
-- Turnless messages of a session, in order (forum reads, monologue views).
CREATE INDEX messages_loose ON messages (tenant, session_id, id) WHERE turn_id IS NULL;
CREATE UNIQUE INDEX messages_origin ON messages (tenant, session_id, origin) WHERE origin IS NOT NULL;

ALTER TABLE sessions ADD COLUMN settings TEXT;
ALTER TABLE turns ADD COLUMN trigger TEXT;

CREATE TABLE participants (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    session_id TEXT    NOT NULL, -- the forum
    actor_type TEXT    NOT NULL,
    actor_id   TEXT    NOT NULL, -- human:<id> or agent:<name>
    actor      TEXT    NOT NULL, -- the Actor as JSON
    trigger    TEXT    NOT NULL,
    metadata   TEXT    NOT NULL,
    joined_at  INTEGER NOT NULL,
    left_at    INTEGER,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
) STRICT;

CREATE INDEX participants_forum ON participants (tenant, session_id, id);
-- One active stint per actor per forum, enforced by the database.
CREATE UNIQUE INDEX participants_one_active ON participants (tenant, session_id, actor_id) WHERE left_at IS NULL;
CREATE INDEX participants_active_agents ON participants (id) WHERE left_at IS NULL AND actor_type = 'agent';
