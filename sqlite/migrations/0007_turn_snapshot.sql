-- A turn's snapshot moves into its row: the terminal write sets it in the
-- UPDATE that fences the turn, instead of upserting a row of its own table
-- (one statement and two pages of the log fewer per turn).
ALTER TABLE turns ADD COLUMN snapshot TEXT;

UPDATE turns SET snapshot = s.body
FROM snapshots AS s
WHERE s.tenant = turns.tenant AND s.turn_id = turns.id;

DROP TABLE snapshots;
