-- A branch is read without walking its chain of turns. Each turn records
-- its depth (0 for a root, the previous turn's plus one otherwise) and its
-- lineage: a run of turns each chaining from the one before, named by the
-- id of its first turn. A turn that chains from the session's tip (which
-- is always the newest turn, so it has no other child) continues that
-- turn's lineage; a root or a fork begins a lineage of its own. So one
-- lineage is a straight chain, and the branch ending at a turn is its
-- lineage up to its depth, then the lineage of the turn the first one
-- chained from up to that turn's depth, and so on: one step per fork
-- (ListMessages, LatestCompaction).
ALTER TABLE turns ADD COLUMN lineage text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN depth integer NOT NULL DEFAULT 0;

-- Existing turns: the first child (smallest id) of a turn continues its
-- lineage, the others begin their own. A turn no root leads to (a broken
-- chain) is a root of its own lineage. The owner reads every tenant's
-- turns for this, so row security is not forced while it runs.
ALTER TABLE turns NO FORCE ROW LEVEL SECURITY;
CREATE INDEX turns_previous_tmp ON turns (tenant, previous_turn_id);
WITH RECURSIVE first_child AS MATERIALIZED (
    SELECT tenant, previous_turn_id AS parent, min(id) AS child FROM turns
    WHERE previous_turn_id IS NOT NULL GROUP BY tenant, previous_turn_id
), walk(tenant, id, lineage, depth) AS (
    SELECT tenant, id, id, 0 FROM turns WHERE previous_turn_id IS NULL
    UNION ALL
    SELECT c.tenant, c.id, CASE WHEN f.child = c.id THEN w.lineage ELSE c.id END, w.depth + 1
    FROM walk w
    JOIN turns c ON c.tenant = w.tenant AND c.previous_turn_id = w.id
    JOIN first_child f ON f.tenant = w.tenant AND f.parent = w.id
)
UPDATE turns t SET lineage = w.lineage, depth = w.depth
FROM walk w WHERE w.tenant = t.tenant AND w.id = t.id;
UPDATE turns SET lineage = id WHERE lineage = '';
DROP INDEX turns_previous_tmp;
ALTER TABLE turns FORCE ROW LEVEL SECURITY;

-- The newest compaction boundary of a branch is found among the session's
-- summaries, newest first, instead of by walking the chain from the tip.
CREATE INDEX messages_summary ON messages (tenant, session_id, id) WHERE summary;
