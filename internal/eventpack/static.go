package eventpack

// staticDict starts every body's dictionary: the keys and common values of
// the rows events carry, for what the rows themselves do not hold (a
// running turn's log, whose rows are not final yet, and events of no row).
// Frozen with version 1.
var staticDict = []byte(`"state":"pending","state":"running","state":"error","state":"interrupted",` +
	`"type":"tool","call_id":"call_","tool":"","arguments":{},"output":"","error":"",` +
	`"type":"reasoning","type":"patch","type":"file","type":"agent","type":"subtask","type":"compaction",` +
	`{"id":"thr_","agent":"","call_id":"call_","parent_thread_id":"thr_","thread_id":"thr_","status":"done","result":"",` +
	`{"required_actions":[{"type":"approval","type":"client_tool","call_id":"call_",` +
	`"status":"cancelled","status":"errored","cancel_reason":"client","error":{"code":"","message":""},` +
	`"finish":"tool_calls","finish":"length","finish":"error","role":"tool","role":"assistant","model":"",` +
	`"usage":{"input_tokens":0,"output_tokens":0,"reasoning_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0,"cost":0},` +
	`"type":"step-start","data":{"iteration":1},"type":"step-finish","data":{"finish":"stop","iteration":1,"usage":{"input_tokens":` +
	`{"id":"turn_","session_id":"ses_","previous_turn_id":null,"agent_id":"ag_","agent_version":1,"status":"running",` +
	`"input":[{"type":"message","text":""}],"output":null,"required_actions":[],"error":null,"cancel_reason":null,` +
	`"usage":{"input_tokens":0,"output_tokens":0,"cost":0},"iterations":0,"last_seq":0,"created_at":"2026-01-01T00:00:00.","ended_at":null}` +
	`{"id":"msg_","session_id":"ses_","turn_id":"turn_","thread_id":"thr_","role":"user","parent_id":null,"created_at":"2026-` +
	`","parts":[{"id":"prt_","message_id":"msg_","type":"text","text":"","state":"streaming","created_at":"2026-` +
	`Z","updated_at":"2026-","state":"completed","created_at":"`)
