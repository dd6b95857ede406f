-- Runs still pending after their firer stopped (killed between claiming
-- the slot and recording the turn) are found and fired again, with
-- idempotency keys (scheduler.recover): this index finds them.
CREATE INDEX schedule_runs_pending ON schedule_runs (fired_at) WHERE status = 'pending';
