-- Schedules (API.md, "Schedules"): a schedule's next slot is next_run_at
-- (Unix ns); a replica claims a slot by moving it forward with a
-- compare-and-swap and records the run in the same transaction, so each
-- slot fires once. A run's slot is unique per schedule.
CREATE TABLE schedules (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    agent       TEXT    NOT NULL,
    cron        TEXT    NOT NULL DEFAULT '',
    every       TEXT    NOT NULL DEFAULT '',
    timezone    TEXT    NOT NULL,
    input       TEXT    NOT NULL,
    session_id  TEXT,
    catch_up    TEXT    NOT NULL,
    paused      INTEGER NOT NULL DEFAULT 0,
    next_run_at INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT, WITHOUT ROWID;

-- The scheduler's poll: live schedules by their next slot.
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE paused = 0;

CREATE TABLE schedule_runs (
    tenant      TEXT    NOT NULL,
    schedule_id TEXT    NOT NULL,
    slot        INTEGER NOT NULL,
    id          TEXT    NOT NULL,
    fired_at    INTEGER NOT NULL,
    session_id  TEXT,
    turn_id     TEXT,
    status      TEXT    NOT NULL,
    error       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (tenant, schedule_id, slot),
    FOREIGN KEY (tenant, schedule_id) REFERENCES schedules (tenant, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;

CREATE UNIQUE INDEX schedule_runs_id ON schedule_runs (tenant, id);
