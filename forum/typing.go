package forum

// TypingData is the data of forum.typing: an ephemeral event of the
// forum (no seq, never stored or replayed), published on the bus so that
// the forum's readers on every replica see it (worker.followMonologue).
type TypingData struct {
	ParticipantID string `json:"participant_id"`
	Typing        bool   `json:"typing"`
}
