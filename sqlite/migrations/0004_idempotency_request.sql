-- An Idempotency-Key is bound to the request first made with it (a hash of
-- its method, path and canonical body) and may expire; expires_at 0 means
-- never. Records written before were kept 24 h.
ALTER TABLE idempotency ADD COLUMN request_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
UPDATE idempotency SET expires_at = created_at + 86400000000000;
