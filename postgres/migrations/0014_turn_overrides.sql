-- A turn's per-request settings (forge.TurnOverrides, JSON): what its
-- request set beside the agent (instructions, model parameters, tools,
-- output schema). NULL for the turns that set none, which are most.
ALTER TABLE turns ADD COLUMN overrides text COLLATE "C";
