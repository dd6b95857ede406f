-- API keys (forge keys create|list|revoke). Only the SHA-256 of a key's
-- secret is stored; key_hash is unique across tenants because a request's
-- key is looked up before its tenant is known.
CREATE TABLE api_keys (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    key_hash   BLOB    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER,
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE INDEX api_keys_live ON api_keys (id) WHERE revoked_at IS NULL;
