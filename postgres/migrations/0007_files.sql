-- Files (API.md, "Files and attachments"): metadata in files, the bytes
-- once per tenant and content hash in file_blobs and its chunks
-- (forge.FileChunkBytes each), so a file attached twice is stored once
-- and no read or write holds a whole file. A blob goes with the last file
-- that has its hash (DeleteFile, which locks the blob row first, as
-- CreateFile's upsert of it does). Tenant tables like the others: row
-- security on every one.
CREATE TABLE file_blobs (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    sha256     text COLLATE "C" NOT NULL,
    bytes      bigint           NOT NULL,
    chunks     integer          NOT NULL,
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, sha256)
);

CREATE TABLE file_chunks (
    tenant text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    sha256 text COLLATE "C" NOT NULL,
    seq    integer          NOT NULL,
    data   bytea            NOT NULL,
    PRIMARY KEY (tenant, sha256, seq)
);
-- The chunks are already compressed media or small text: storing them
-- out of line uncompressed saves PostgreSQL the attempt.
ALTER TABLE file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE files (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    id         text COLLATE "C" NOT NULL,
    filename   text             NOT NULL,
    mime_type  text COLLATE "C" NOT NULL,
    bytes      bigint           NOT NULL,
    sha256     text COLLATE "C" NOT NULL,
    purpose    text COLLATE "C" NOT NULL DEFAULT '',
    width      integer          NOT NULL DEFAULT 0,
    height     integer          NOT NULL DEFAULT 0,
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, sha256) REFERENCES file_blobs (tenant, sha256)
);
CREATE INDEX files_blob ON files (tenant, sha256);

DO $$
DECLARE
    t text COLLATE "C";
BEGIN
    FOREACH t IN ARRAY ARRAY['file_blobs', 'file_chunks', 'files']
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format($p$CREATE POLICY tenant_isolation ON %I
            USING (tenant = current_setting('forge.tenant', true))
            WITH CHECK (tenant = current_setting('forge.tenant', true))$p$, t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO {{runtime}}', t);
    END LOOP;
END
$$;

-- file_chunks_present raises FG003 (conflict) unless the tenant holds
-- p_chunks chunks of the blob p_sha: CreateFile's last transaction checks
-- that the chunks it found (or wrote) did not go meanwhile, and, when they
-- did, writes nothing and writes them again.
CREATE FUNCTION file_chunks_present(p_sha text, p_chunks integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM file_chunks
        WHERE tenant = current_setting('forge.tenant', true) AND sha256 = p_sha) <> p_chunks THEN
        RAISE EXCEPTION 'the chunks of blob % went meanwhile', p_sha USING ERRCODE = 'FG003';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION file_chunks_present(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION file_chunks_present(text, integer) TO {{runtime}};
