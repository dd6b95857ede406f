-- Files (API.md, "Files and attachments"): metadata in files, the bytes
-- once per tenant and content hash in file_blobs and its chunks
-- (forge.FileChunkBytes each), so a file attached twice is stored once
-- and no read or write holds a whole file. A blob goes with the last file
-- that has its hash (DeleteFile).
CREATE TABLE file_blobs (
    tenant     TEXT    NOT NULL,
    sha256     TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    chunks     INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, sha256)
) STRICT, WITHOUT ROWID;

CREATE TABLE file_chunks (
    tenant TEXT    NOT NULL,
    sha256 TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    data   BLOB    NOT NULL,
    PRIMARY KEY (tenant, sha256, seq)
) STRICT;

CREATE TABLE files (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    filename   TEXT    NOT NULL,
    mime_type  TEXT    NOT NULL,
    bytes      INTEGER NOT NULL,
    sha256     TEXT    NOT NULL,
    purpose    TEXT    NOT NULL DEFAULT '',
    width      INTEGER NOT NULL DEFAULT 0,
    height     INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, sha256) REFERENCES file_blobs (tenant, sha256)
) STRICT, WITHOUT ROWID;

CREATE INDEX files_blob ON files (tenant, sha256);
