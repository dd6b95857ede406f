-- Whether a tool result still references a file (an MCP tool's images,
-- data.files of tool parts) once a purged session's parts are gone: only
-- the tool parts that carry files are in it, so the check reads those of
-- the tenant, never every part.
CREATE INDEX parts_tool_files ON parts (tenant) WHERE type = 'tool' AND json_type(data, '$.files') = 'array';
