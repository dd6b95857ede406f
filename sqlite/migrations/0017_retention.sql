-- Retention (API.md, "Retention and listing"). The sweeper reads, across
-- tenants, the direct sessions idle the longest and the sessions deleted
-- the longest ago; an agent's session TTL is a column so that the query
-- can compare it (nanoseconds; NULL: the server's default).
ALTER TABLE agents ADD COLUMN session_ttl INTEGER;

CREATE INDEX sessions_idle ON sessions (updated_at) WHERE deleted_at IS NULL AND kind = 'direct';
CREATE INDEX sessions_deleted ON sessions (deleted_at) WHERE deleted_at IS NOT NULL;

-- A session a schedule continues is not expired under it.
CREATE INDEX schedules_session ON schedules (tenant, session_id) WHERE session_id IS NOT NULL;

-- Whether any message still references a file, once a purged session's
-- messages are gone (only file parts are in it: other parts cost nothing).
CREATE INDEX parts_file ON parts (tenant, json_extract(data, '$.file_id')) WHERE type = 'file';
