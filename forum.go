package forge

import (
	"context"
	"encoding/json"
	"time"
)

// Forum event types (API.md "Forums"). All but forum.typing are stored on
// the forum session's log; forum.typing is ephemeral.
const (
	EventForumMessage       = "forum.message"
	EventForumMemberJoined  = "forum.member.joined"
	EventForumMemberLeft    = "forum.member.left"
	EventMonologueCompacted = "agent.monologue.compacted"
	EventForumTyping        = "forum.typing"
)

// Actor types of a participant stint.
const (
	ActorHuman = "human"
	ActorAgent = "agent"
)

// Trigger policies of an agent stint.
const (
	TriggerAuto    = "auto"
	TriggerMention = "mention"
	TriggerAlways  = "always"
)

// Forum message kinds.
const (
	ForumKindMessage = "message"
	ForumKindReply   = "reply"
	ForumKindNotice  = "notice"
)

// Actor is who holds a participant stint: a human by the id the
// application gives it, or an agent by name.
type Actor struct {
	Type  string `json:"type"`
	ID    string `json:"id,omitempty"`
	Agent string `json:"agent,omitempty"`
}

// Key is the actor's id as API.md spells it: human:<id> or agent:<name>.
func (a Actor) Key() string {
	if a.Type == ActorAgent {
		return ActorAgent + ":" + a.Agent
	}
	return ActorHuman + ":" + a.ID
}

// Name is how the actor is shown to models: its id or agent name.
func (a Actor) Name() string {
	if a.Type == ActorAgent {
		return a.Agent
	}
	return a.ID
}

// ParticipantMetadata is a stint's metadata. MonologueID is the one
// canonical pointer to an agent stint's current monologue.
type ParticipantMetadata struct {
	MonologueID string `json:"monologue_id,omitempty"`
}

// Participant is one stint of an actor in a forum, from join to leave. A
// re-join is a new stint.
type Participant struct {
	ID       string              `json:"id"`
	Tenant   string              `json:"-"`
	ForumID  string              `json:"forum_id"`
	Actor    Actor               `json:"actor"`
	ActorID  string              `json:"actor_id"`
	Trigger  string              `json:"trigger,omitempty"`
	JoinedAt time.Time           `json:"joined_at"`
	LeftAt   *time.Time          `json:"left_at"`
	Metadata ParticipantMetadata `json:"metadata"`
}

// Active reports whether the stint has not ended.
func (p *Participant) Active() bool { return p.LeftAt == nil }

// PairWindow bounds the replies exchanged by two agents in a window.
type PairWindow struct {
	Max     int `json:"max"`
	Seconds int `json:"seconds"`
}

// ForumGuards stop agents from looping (API.md "Guards").
type ForumGuards struct {
	MaxAgentStreak int        `json:"max_agent_streak"`
	PairWindow     PairWindow `json:"pair_window"`
}

// DefaultForumGuards are the guards of a forum created without any.
func DefaultForumGuards() ForumGuards {
	return ForumGuards{MaxAgentStreak: 8, PairWindow: PairWindow{Max: 6, Seconds: 60}}
}

// The bounds of a forum's guards (API.md "Guards"): a guard cannot be
// switched off or raised so far that agents talk among themselves for
// minutes.
const (
	MaxAgentStreakLimit    = 100
	PairWindowMaxLimit     = 100
	PairWindowSecondsLimit = 86400
)

// Bounded returns the guards with every value within its bounds: a value
// above its limit, zero or negative (a guard is never off) becomes the
// limit, the loosest a forum may have. Forums stored before the bounds
// existed are guarded by these.
func (g ForumGuards) Bounded() ForumGuards {
	bound := func(v, limit int) int {
		if v <= 0 || v > limit {
			return limit
		}
		return v
	}
	g.MaxAgentStreak = bound(g.MaxAgentStreak, MaxAgentStreakLimit)
	g.PairWindow.Max = bound(g.PairWindow.Max, PairWindowMaxLimit)
	g.PairWindow.Seconds = bound(g.PairWindow.Seconds, PairWindowSecondsLimit)
	return g
}

// ForumInfo is what a message of a forum session says beyond its text: its
// kind, its author's stint, what it replies to and whom it mentions. It is
// stored with the message and never shown as the message's metadata.
type ForumInfo struct {
	Kind          string   `json:"kind"`
	ParticipantID string   `json:"participant_id,omitempty"`
	ActorID       string   `json:"actor_id,omitempty"`
	ReplyTo       string   `json:"reply_to,omitempty"`
	Mentions      []string `json:"mentions,omitempty"`
	// SourceTurnID is, for a reply, the monologue turn that produced it.
	SourceTurnID string `json:"source_turn_id,omitempty"`
	// Quiet marks a reply a guard stopped: it is ingested but triggers no
	// agent.
	Quiet bool `json:"quiet,omitempty"`
	// Guard names the guard a notice is about.
	Guard string `json:"guard,omitempty"`
}

// ForumAuthor is the author of a forum message.
type ForumAuthor struct {
	ParticipantID string `json:"participant_id"`
	ActorID       string `json:"actor_id"`
}

// ForumMessage is a message of a forum as API.md shows it.
type ForumMessage struct {
	ID       string          `json:"id"`
	ForumID  string          `json:"forum_id"`
	Kind     string          `json:"kind"`
	Author   *ForumAuthor    `json:"author"`
	Text     string          `json:"text"`
	Mentions []string        `json:"mentions"`
	ReplyTo  *string         `json:"reply_to"`
	Metadata json.RawMessage `json:"metadata"`
	// Files are the message's attachments (API.md, "Files and
	// attachments"): its monologue copies reference the same files.
	Files     []FileData `json:"files,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
}

// SourceMeta is the metadata of a forum message copied into a monologue.
type SourceMeta struct {
	SourceConversationID string `json:"source_conversation_id"`
	SourceMessageID      string `json:"source_message_id"`
	SourceActorID        string `json:"source_actor_id"`
	// SourceName is the author as the monologue's model sees it, chosen
	// when the copy is made: the actor's name ("alice", "support"), or its
	// whole id ("human:support") for a human whose id names one of the
	// tenant's agents, so that the human cannot pass for the agent.
	// Copies made before it existed show the name.
	SourceName string `json:"source_name,omitempty"`
	// Type is "reply" on a monologue's final message that was published,
	// "withheld" on one a guard kept out of the forum.
	Type string `json:"type,omitempty"`
	// SeededFrom is set on a copy carried into a new monologue by a
	// compaction swap: the monologue it was first copied into.
	SeededFrom string `json:"seeded_from,omitempty"`
}

// MetadataTypeReply marks a monologue message published as a reply.
const MetadataTypeReply = "reply"

// MetadataTypeWithheld marks a monologue message whose reply a guard kept
// out of the forum (the streak or the pair window was full when it was
// decided): decided once, like a published reply, so neither a restart
// nor a second replica publishes it later.
const MetadataTypeWithheld = "withheld"

// TurnTrigger is what started a turn that no client's request did: on a
// monologue turn, the ingested copy it answers; on a schedule's run
// (Type TriggerSchedule), the schedule.
type TurnTrigger struct {
	// Type is TriggerSchedule for a schedule's run, "" on a monologue
	// turn (the forum's triggers predate it).
	Type       string `json:"type,omitempty"`
	ScheduleID string `json:"schedule_id,omitempty"`
	// CopyID is the copy's message id in the monologue.
	CopyID               string `json:"copy_id,omitempty"`
	SourceConversationID string `json:"source_conversation_id,omitempty"`
	SourceMessageID      string `json:"source_message_id,omitempty"`
	// Retry is set on the one rerun of a turn a crash abandoned.
	Retry bool `json:"retry,omitempty"`
}

// MonologueSwap replaces an agent stint's monologue (the compaction swap):
// create New with its seed messages and move the stint's monologue_id from
// OldID to New.ID, in one transaction.
type MonologueSwap struct {
	Tenant        string
	ForumID       string
	ParticipantID string
	OldID         string
	New           *Session
	Seed          []*Message // turnless, with their parts
	// Events go on the forum's log (agent.monologue.compacted).
	Events []Event
}

// LooseAppend writes messages that belong to no turn (forum messages,
// copies in monologues) into a session with the events describing them.
// Its events name no turn either: a turn's events are those committed
// with the turn, within its seqs, and stores read a turn's events there.
type LooseAppend struct {
	Tenant    string
	SessionID string
	Messages  []*Message // with their parts
	Events    []Event
	// Mark sets metadata.type on these messages of other sessions (the
	// monologue message a published or withheld reply came from).
	Mark []MessageRef
}

// MessageRef names a message of a session; as a LooseAppend mark, Type is
// the metadata.type it gets (MetadataTypeReply when empty).
type MessageRef struct {
	SessionID string
	MessageID string
	Type      string
}

// MarkType is the metadata.type a LooseAppend mark sets.
func (r MessageRef) MarkType() string {
	if r.Type == "" {
		return MetadataTypeReply
	}
	return r.Type
}

// ForumStore keeps participant stints and messages outside turns.
type ForumStore interface {
	// AddParticipant inserts the stint p of forum p.ForumID, and, when
	// monologue is set, creates that session, with events on the forum's
	// log, in one transaction. ErrConflict when the actor has an active
	// stint in the forum (enforced by the database).
	AddParticipant(ctx context.Context, p *Participant, monologue *Session, events []Event) error
	// EndParticipant ends an active stint at `at` with events on the
	// forum's log; it returns the stint and whether this call ended it (an
	// ended stint is returned as it is, and nothing is written).
	EndParticipant(ctx context.Context, tenant, forumID, participantID string, at time.Time, events []Event) (*Participant, bool, error)
	GetParticipant(ctx context.Context, tenant, forumID, participantID string) (*Participant, error)
	// ListParticipants lists a forum's stints, oldest first: the active
	// ones, or all with all set.
	ListParticipants(ctx context.Context, tenant, forumID string, all bool, opts ListOptions) ([]*Participant, string, error)
	// ActiveAgentStints lists the active agent stints of every forum of
	// every tenant (startup).
	ActiveAgentStints(ctx context.Context) ([]*Participant, error)
	// AppendLoose writes a.Messages (TurnID "") and a.Events in one
	// transaction. A message whose Origin the session already holds is
	// ErrConflict and nothing is written.
	AppendLoose(ctx context.Context, a *LooseAppend) error
	// MessageByOrigin returns the session's message with that origin.
	MessageByOrigin(ctx context.Context, tenant, sessionID, origin string) (*Message, error)
	// ListLoose lists a session's messages that belong to no turn, with
	// their parts, oldest first; the cursor is the last message id.
	ListLoose(ctx context.Context, tenant, sessionID string, opts ListOptions) ([]*Message, string, error)
	// LastLoose returns up to n of the session's newest turnless
	// messages, oldest first.
	LastLoose(ctx context.Context, tenant, sessionID string, n int) ([]*Message, error)
	// SwapMonologue performs s; ErrConflict when the stint's monologue is
	// no longer s.OldID or the stint has ended.
	SwapMonologue(ctx context.Context, s *MonologueSwap) error
}
