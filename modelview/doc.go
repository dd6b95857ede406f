// Package modelview is what a model is sent of a session's history: the
// one definition the engine (each model request of a turn), the forum (a
// monologue's compaction threshold) and the HTTP API (GET
// /v1/sessions/{id}/messages?view=model) share. It is pure: it reads
// messages and returns views of them, with no store and no clock.
//
//   - FilterCompacted: the view after the newest compaction boundary
//     (DESIGN.md "filterCompacted").
//   - Convert and Memo: the model messages of a view, each call's latest
//     state folded back right after the assistant message that made it
//     (docs/decisions.md); Memo converts each settled message once.
//   - MonologueOrder: a monologue's messages in the order the model reads
//     them.
//   - PruneToolOutputs: older tool outputs replaced by a marker.
//   - EstimateTokens and the other estimates: about 4 characters a token.
package modelview
