-- The free text a client gives when it cancels a turn.
ALTER TABLE turns ADD COLUMN cancel_message TEXT;
