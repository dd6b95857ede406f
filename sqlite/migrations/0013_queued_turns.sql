-- Busy sessions (API.md): a turn asked for with if_busy enqueue while
-- another runs waits as a row of status 'queued' holding the request it
-- will start with (the engine's encoding). Starting it (BeginTurn with
-- Promote) replaces the row with the running turn in one transaction, so
-- the unique index turns_one_running decides which of racing replicas
-- starts it. Queued rows are few: a partial index finds them.
ALTER TABLE turns ADD COLUMN queued_request TEXT;
CREATE INDEX turns_queued ON turns (tenant, session_id, created_at, id) WHERE status = 'queued';
