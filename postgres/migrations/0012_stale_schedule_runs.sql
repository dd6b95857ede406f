-- Runs still pending after their firer stopped (killed between claiming
-- the slot and recording the turn) are found and fired again, with
-- idempotency keys (scheduler.recover). stale_schedule_runs is the path
-- across tenants, as due_schedules is: ids only, then each tenant's rows
-- through the ordinary policy.
CREATE INDEX schedule_runs_pending ON schedule_runs (fired_at) WHERE status = 'pending';

GRANT SELECT (tenant, id, status, fired_at) ON schedule_runs TO {{lookup}};
CREATE POLICY lookup_stale ON schedule_runs FOR SELECT TO {{lookup}} USING (status = 'pending');

CREATE FUNCTION stale_schedule_runs(p_before timestamptz, p_limit integer) RETURNS TABLE (tenant text, id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = forge, pg_temp AS $$
    SELECT r.tenant, r.id FROM forge.schedule_runs r
    WHERE r.status = 'pending' AND r.fired_at < p_before
    ORDER BY r.fired_at LIMIT p_limit
$$;
REVOKE ALL ON FUNCTION stale_schedule_runs(timestamptz, integer) FROM PUBLIC;
GRANT CREATE ON SCHEMA forge TO {{lookup}};
ALTER FUNCTION stale_schedule_runs(timestamptz, integer) OWNER TO {{lookup}};
REVOKE CREATE ON SCHEMA forge FROM {{lookup}};
GRANT EXECUTE ON FUNCTION stale_schedule_runs(timestamptz, integer) TO {{runtime}};
