-- Lists of sessions go by last update (API.md, "Retention and listing":
-- newest first by default), and the retention sweeper reads the sessions
-- idle the longest: both walk this index.
CREATE INDEX sessions_updated ON sessions (tenant, updated_at, id) WHERE deleted_at IS NULL;
