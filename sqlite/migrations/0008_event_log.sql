-- The event log in packs (sqlite/events.go, internal/eventpack): one row
-- per run of a session's events, compressed against the rows they
-- announce, instead of one row per event holding a copy of its row.
-- turn_id is set while the events' turn runs (packed without rows) and
-- NULL once its terminal write packed them against its rows; events
-- outside turns have none. The table is clustered on its key (WITHOUT
-- ROWID): no second copy of the key in an index.
CREATE TABLE event_log (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    turn_id    TEXT,
    body       BLOB    NOT NULL,
    PRIMARY KEY (tenant, session_id, first_seq),
    FOREIGN KEY (tenant, session_id) REFERENCES sessions (tenant, id)
) STRICT, WITHOUT ROWID;

-- A turn's first stored seq: with last_seq, the part of the log that a
-- replay of the turn reads. Rows of the old log keep being read from
-- events (through events_turn); new writes go to event_log only.
ALTER TABLE turns ADD COLUMN first_seq INTEGER;

UPDATE turns SET first_seq = (
    SELECT min(e.seq) FROM events e WHERE e.tenant = turns.tenant AND e.turn_id = turns.id
);

-- The packs still waiting for their turn's end (few at any time): the
-- packer finds those of ended turns after a restart.
CREATE INDEX event_log_open ON event_log (tenant, turn_id) WHERE turn_id IS NOT NULL;
