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
ALTER TABLE turns ADD COLUMN lineage TEXT NOT NULL DEFAULT '';
ALTER TABLE turns ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;

-- Existing turns: the first child (smallest id) of a turn continues its
-- lineage, the others begin their own. A turn no root leads to (a broken
-- chain) is a root of its own lineage.
CREATE INDEX turns_previous_tmp ON turns (tenant, previous_turn_id);
CREATE TEMP TABLE turn_first_child (tenant TEXT, parent TEXT, child TEXT, PRIMARY KEY (tenant, parent));
INSERT INTO turn_first_child
    SELECT tenant, previous_turn_id, min(id) FROM turns WHERE previous_turn_id IS NOT NULL
    GROUP BY tenant, previous_turn_id;
CREATE TEMP TABLE turn_lineage (tenant TEXT, id TEXT, lineage TEXT, depth INTEGER, PRIMARY KEY (tenant, id));
WITH RECURSIVE walk(tenant, id, lineage, depth) AS (
    SELECT tenant, id, id, 0 FROM turns WHERE previous_turn_id IS NULL
    UNION ALL
    SELECT c.tenant, c.id, CASE WHEN f.child = c.id THEN w.lineage ELSE c.id END, w.depth + 1
    FROM walk w
    JOIN turns c ON c.tenant = w.tenant AND c.previous_turn_id = w.id
    JOIN turn_first_child f ON f.tenant = w.tenant AND f.parent = w.id
)
INSERT OR IGNORE INTO turn_lineage SELECT tenant, id, lineage, depth FROM walk;
UPDATE turns SET lineage = l.lineage, depth = l.depth
    FROM turn_lineage AS l WHERE l.tenant = turns.tenant AND l.id = turns.id;
UPDATE turns SET lineage = id WHERE lineage = '';
DROP TABLE turn_lineage;
DROP TABLE turn_first_child;
DROP INDEX turns_previous_tmp;

-- The newest compaction boundary of a branch is found among the session's
-- summaries, newest first, instead of by walking the chain from the tip.
CREATE INDEX messages_summary ON messages (tenant, session_id, id) WHERE summary = 1;
