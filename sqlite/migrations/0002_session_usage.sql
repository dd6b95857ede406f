-- Forge schema, version 2: a session's usage total.
--
-- The running total of the usage of the session's ended turns, one numeric
-- column per field of forge.Usage, so that a turn's terminal write adds its
-- usage with one UPDATE inside its own (fenced) transaction.

ALTER TABLE sessions ADD COLUMN usage_input_tokens       INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_output_tokens      INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_reasoning_tokens   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_read_tokens  INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cost               REAL    NOT NULL DEFAULT 0;

-- Existing sessions start from the sum of the turns that already ended, so
-- every ended turn is counted exactly once: turns ended before this
-- migration here, turns still running at their terminal write. A field
-- absent from a turn's usage JSON (omitempty) counts as 0.
UPDATE sessions SET
    usage_input_tokens       = u.input_tokens,
    usage_output_tokens      = u.output_tokens,
    usage_reasoning_tokens   = u.reasoning_tokens,
    usage_cache_read_tokens  = u.cache_read_tokens,
    usage_cache_write_tokens = u.cache_write_tokens,
    usage_cost               = u.cost
FROM (
    SELECT tenant, session_id,
        coalesce(sum(json_extract(usage, '$.input_tokens')), 0)       AS input_tokens,
        coalesce(sum(json_extract(usage, '$.output_tokens')), 0)      AS output_tokens,
        coalesce(sum(json_extract(usage, '$.reasoning_tokens')), 0)   AS reasoning_tokens,
        coalesce(sum(json_extract(usage, '$.cache_read_tokens')), 0)  AS cache_read_tokens,
        coalesce(sum(json_extract(usage, '$.cache_write_tokens')), 0) AS cache_write_tokens,
        total(json_extract(usage, '$.cost'))                         AS cost
    FROM turns
    WHERE status <> 'running'
    GROUP BY tenant, session_id
) AS u
WHERE sessions.tenant = u.tenant AND sessions.id = u.session_id;
