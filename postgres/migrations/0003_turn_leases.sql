-- Turn ownership leases (distributed mode, docs/distributed.md).
--
-- A running turn has one lease: the replica running it (owner) renews it
-- every third of the lease period; once expires_at has passed, any replica
-- may take it (an UPDATE that only matches an expired lease) and end the
-- turn abandoned. Batches of a running turn are fenced on their writer
-- still holding the lease (lease_held, which locks the lease row FOR SHARE,
-- so a takeover waits for a batch in flight and sees what it wrote), and a
-- terminal write deletes it. Times are the database's, so replicas' clocks
-- do not matter.

CREATE TABLE turn_leases (
    tenant     text COLLATE "C" NOT NULL CHECK (tenant <> ''),
    turn_id    text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    owner      text COLLATE "C" NOT NULL,
    expires_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, turn_id),
    FOREIGN KEY (tenant, turn_id) REFERENCES turns (tenant, id) ON DELETE CASCADE
);

ALTER TABLE turn_leases ENABLE ROW LEVEL SECURITY;
ALTER TABLE turn_leases FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON turn_leases
    USING (tenant = current_setting('forge.tenant', true))
    WITH CHECK (tenant = current_setting('forge.tenant', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON turn_leases TO {{runtime}};

-- lease_held raises FG001 (the turn ended, as far as this writer is
-- concerned) unless p_owner holds the turn's lease, and keeps the lease
-- row locked until the end of the transaction.
CREATE FUNCTION lease_held(p_turn text, p_owner text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    o text COLLATE "C";
BEGIN
    SELECT owner INTO o FROM forge.turn_leases
        WHERE tenant = current_setting('forge.tenant', true) AND turn_id = p_turn FOR SHARE;
    IF o IS DISTINCT FROM p_owner THEN
        RAISE EXCEPTION 'turn % is no longer owned by this replica (lease held by %)', p_turn, coalesce(o, 'nobody')
            USING ERRCODE = 'FG001';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION lease_held(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lease_held(text, text) TO {{runtime}};

-- The deliberate path across tenants: expired_turns lists the running
-- turns whose lease has expired or that have none, as ids only (like
-- running_turns); the store then reads each turn with its tenant set, and
-- takes its lease through the ordinary policy. The lookup role may read
-- three columns of the leases.
GRANT SELECT (tenant, turn_id, expires_at) ON turn_leases TO {{lookup}};
CREATE POLICY lookup_leases ON turn_leases FOR SELECT TO {{lookup}} USING (true);

CREATE FUNCTION expired_turns() RETURNS TABLE (tenant text, session_id text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT t.tenant, t.session_id, t.id FROM forge.turns t
    WHERE t.status = 'running' AND NOT EXISTS (
        SELECT 1 FROM forge.turn_leases l
        WHERE l.tenant = t.tenant AND l.turn_id = t.id AND l.expires_at >= now())
    ORDER BY t.tenant, t.session_id
$$;
REVOKE ALL ON FUNCTION expired_turns() FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION expired_turns() OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION expired_turns() TO {{runtime}};
