package forge

import (
	"context"
	"time"
)

// Store is everything Forge persists. Implementations (sqlite, postgres)
// pass the shared conformance suite in storetest. Every method is scoped to
// a tenant; another tenant's rows are ErrNotFound. A failure of the
// database itself (closed, unreachable, disk full) wraps ErrStore, never
// an answer about the data; the end of the caller's context stays a
// context error.
type Store interface {
	AgentStore
	SessionStore
	TurnStore
	MessageStore
	EventStore
	IdempotencyStore
	ForumStore
	ScheduleStore
	Close(ctx context.Context) error
}

// ListOptions page a keyset-paginated list. Cursor is the opaque
// next_cursor of the previous page; Limit 0 means the default.
type ListOptions struct {
	Limit  int
	Cursor string
}

// SessionQuery filters and orders a list of sessions (API.md, "Retention
// and listing"). The zero value lists every live session, newest update
// first.
type SessionQuery struct {
	ListOptions
	Agent string
	Kind  string
	// Status is "running" (a turn of the session runs), "idle" (none
	// does) or "" (either).
	Status string
	// Metadata keeps sessions whose metadata has each key with that value
	// (a string, or a number or boolean as its JSON text).
	Metadata map[string]string
	// UpdatedAfter and UpdatedBefore, when set, bound the last update
	// (exclusive).
	UpdatedAfter, UpdatedBefore time.Time
	// Ascending lists the oldest update first.
	Ascending bool
}

// Session list statuses.
const (
	SessionRunning = "running"
	SessionIdle    = "idle"
)

// AgentStore keeps versioned agents.
type AgentStore interface {
	// CreateAgent inserts version 1 of a new agent; ErrConflict when the
	// name is taken. It sets ID, Version, CreatedAt, UpdatedAt.
	CreateAgent(ctx context.Context, a *Agent) error
	// UpdateAgent stores a new version of the agent named a.Name and sets
	// a's ID, Version and timestamps; ErrNotFound when there is none.
	UpdateAgent(ctx context.Context, a *Agent) error
	// GetAgent returns the current version of a live agent.
	GetAgent(ctx context.Context, tenant, name string) (*Agent, error)
	// AgentForTurn is GetAgent for a caller about to begin a turn with the
	// agent, which sets BeginTurn.AgentName: the version may come from this
	// process's cache, and another process may have updated or deleted the
	// agent since. BeginTurn then refuses the turn (ErrConflict) unless the
	// version is still the agent's current one, and the store forgets what
	// it kept, so a retry reads the agent afresh.
	AgentForTurn(ctx context.Context, tenant, name string) (*Agent, error)
	// GetAgentVersion returns one version of an agent, deleted or not.
	GetAgentVersion(ctx context.Context, tenant, id string, version int) (*Agent, error)
	ListAgents(ctx context.Context, tenant string, opts ListOptions) ([]*Agent, string, error)
	// DeleteAgent hides the agent from new sessions; its versions remain
	// readable for the sessions that use them.
	DeleteAgent(ctx context.Context, tenant, name string) error
}

// SessionStore keeps sessions.
type SessionStore interface {
	CreateSession(ctx context.Context, s *Session) error
	GetSession(ctx context.Context, tenant, id string) (*Session, error)
	// SessionForTurn is GetSession for a caller about to begin a turn in
	// the session, which passes its TipTurnID as BeginTurn.ExpectTip: the
	// row may come from this process's cache, so its tip, usage and update
	// time may be older than the store's (another process ran a turn
	// since), and the session may have been deleted since; its other fields
	// never change. BeginTurn refuses a stale tip (ErrConflict) and a
	// deleted session (ErrNotFound), and the store then forgets what it
	// kept, so a retry reads the session afresh.
	SessionForTurn(ctx context.Context, tenant, id string) (*Session, error)
	// SessionWithTip is GetSession and the session's tip turn (nil when it
	// has none), as GetTurn returns it, in one read where the store can.
	SessionWithTip(ctx context.Context, tenant, id string) (*Session, *Turn, error)
	// ListSessions lists live sessions matching q, by last update (newest
	// first unless q.Ascending), then id.
	ListSessions(ctx context.Context, tenant string, q SessionQuery) ([]*Session, string, error)
	// DeleteSession soft-deletes a live session: ErrNotFound when there is
	// none, ErrTurnInProgress while a turn of it runs (end it first). With
	// BeginTurn refusing a deleted session, in the same transaction each,
	// a deleted session never has a running turn.
	DeleteSession(ctx context.Context, tenant, id string) error
	// ReserveSeqs raises the session's reserved sequence bound by n and
	// returns the new bound: seqs in (bound-n, bound] belong to the caller.
	// The bound never decreases, so seqs are never reused across restarts.
	ReserveSeqs(ctx context.Context, tenant, sessionID string, n int64) (int64, error)
}

// BeginTurn is the atomic creation of a turn: insert the turn, append its
// input messages and events, move the session tip.
type BeginTurn struct {
	Turn     *Turn
	Messages []*Message // with their parts
	Events   []Event
	// ExpectTip, when set, makes the operation fail with ErrConflict unless
	// the session tip is still this turn id ("" means no tip yet). It guards
	// against validating against a tip that moved.
	ExpectTip *string
	// AgentName, when set, makes the operation fail with ErrConflict
	// (writing nothing) unless the tenant's live agent of that name is
	// Turn.AgentID at version Turn.AgentVersion: it guards a turn prepared
	// from an agent row that may be stale (AgentStore.AgentForTurn).
	AgentName string
	// Lease, when set, creates the turn with its ownership lease in the
	// same transaction (a LeaseStore; ignored by stores without leases).
	Lease *Lease
	// Promote makes the turn the start of the session's queued turn of the
	// same id (EnqueueTurn): its queued row is replaced by the running turn
	// in the same transaction. It fails with ErrTurnEnded when that turn is
	// no longer queued (it started, or was cancelled), ErrConflict when an
	// older turn of the session is still queued, and ErrTurnInProgress, as
	// always, while another turn runs: so a queued turn starts once, in
	// order, whichever replicas try.
	Promote bool
	// SeqsRead is the session's reserved seq bound as the caller read it
	// (Session.SeqReserved; nil: not known): the event log may then reserve
	// the turn's seqs in this write (Claim) instead of a write of their own.
	SeqsRead *int64
	// Claim, set by the event log, is the seq reservation this write makes
	// (SeqClaim).
	Claim *SeqClaim
}

// SeqClaim is a seq reservation made by the write that first uses its
// seqs: in the same transaction the session's reserved bound goes from
// Above to Through. When the bound is not Above (another process reserved
// seqs since it was read) the write fails with ErrSeqClaimLost and writes
// nothing.
type SeqClaim struct{ Above, Through int64 }

// ErrSeqClaimLost refuses a write whose SeqClaim no longer holds. It is an
// ErrConflict; the event log reserves afresh and writes again.
var ErrSeqClaimLost = Errorf(ErrConflict, "the session's reserved seqs moved since they were read")

// QueuedTurn is a turn waiting to run (status queued) and the request it
// will run with, as the engine encoded it.
type QueuedTurn struct {
	Turn    *Turn
	Request []byte
}

// Lease is the ownership of a running turn in distributed mode: the
// replica running it holds it and renews it; once it expires, any replica
// may take it and end the turn abandoned.
type Lease struct {
	// Owner identifies the replica (one id per process).
	Owner string
	// TTL is how long the lease lasts, from the store's clock, unless
	// renewed.
	TTL time.Duration
}

// Batch is one transactional write of a running turn: rows and the events
// that describe them, fenced on the turn still running.
type Batch struct {
	Tenant    string
	SessionID string
	// TurnID fences the batch: it fails with ErrTurnEnded unless this turn
	// is still running. Required.
	TurnID string
	// Turn, when set, rewrites the turn's mutable fields. A terminal status
	// here is the turn's terminal write.
	Turn     *Turn
	Messages []*Message // envelopes only; parts go in Parts
	Parts    []*Part
	Events   []Event
	Snapshot *Snapshot
	// Owner, when set, also fences the batch on Owner holding the turn's
	// lease (a LeaseStore): a replica whose lease was taken writes nothing
	// more for the turn (ErrTurnEnded). A terminal write releases the lease.
	Owner string

	// NoneQueued is set by Commit on a terminal write when the session had
	// no queued turn as the turn ended (a turn queued by a racing request
	// is then started by that request), so the caller need not look for
	// one. Left false, the caller looks.
	NoneQueued bool
}

// TurnRef names a turn of a tenant.
type TurnRef struct {
	Tenant    string
	SessionID string
	TurnID    string
}

// LeaseStore keeps the ownership leases of running turns (distributed
// mode). Times are the store's own, so replicas' clocks do not matter.
// Every method crosses tenants only as its comment says.
type LeaseStore interface {
	// RenewLeases extends by ttl the leases owner holds on turns and
	// returns the ids of those it still holds (a lease another replica took
	// is not renewed; an expired one nobody took is).
	RenewLeases(ctx context.Context, owner string, ttl time.Duration, turns []TurnRef) ([]string, error)
	// ExpiredTurns lists the running turns of every tenant whose lease has
	// expired, or that have none.
	ExpiredTurns(ctx context.Context) ([]*Turn, error)
	// TakeLease makes owner the holder of a running turn's lease for ttl
	// when the lease has expired or there is none, and reports whether it
	// did (false: another replica holds it, or the turn ended).
	TakeLease(ctx context.Context, ref TurnRef, owner string, ttl time.Duration) (bool, error)
}

// TurnStore keeps turns.
type TurnStore interface {
	// BeginTurn fails with ErrTurnInProgress when the session has a running
	// turn, ErrConflict when ExpectTip does not hold or the idempotency key
	// was already used, ErrNotFound when the session does not exist.
	BeginTurn(ctx context.Context, b *BeginTurn) error
	// Commit writes b in one transaction.
	Commit(ctx context.Context, b *Batch) error
	GetTurn(ctx context.Context, tenant, sessionID, turnID string) (*Turn, error)
	// GetTurnByID returns a turn of a live session by its id alone (a
	// client that holds only a turn id, as an OpenAI response id is).
	// ErrNotFound for an unknown turn, another tenant's, or one whose
	// session was deleted.
	GetTurnByID(ctx context.Context, tenant, turnID string) (*Turn, error)
	// TurnByIdempotencyKey finds the turn created with key in the session.
	TurnByIdempotencyKey(ctx context.Context, tenant, sessionID, key string) (*Turn, error)
	// ListTurns lists a session's turns, oldest first.
	ListTurns(ctx context.Context, tenant, sessionID string, opts ListOptions) ([]*Turn, string, error)
	// RunningTurns lists every running turn of every tenant (recovery).
	RunningTurns(ctx context.Context) ([]*Turn, error)
	// GetSnapshot returns the snapshot written at the turn's end.
	GetSnapshot(ctx context.Context, tenant, turnID string) (*Snapshot, error)

	// Busy sessions (API.md): a turn asked for while another runs, with
	// if_busy enqueue, waits as a queued turn.

	// EnqueueTurn stores t (status TurnQueued) with request, without
	// touching the session's tip. ErrNotFound when the session is not
	// live, ErrConflict when the idempotency key or the id was used.
	EnqueueTurn(ctx context.Context, t *Turn, request []byte) error
	// NextQueuedTurn returns the session's oldest queued turn (creation
	// order); ErrNotFound when none is queued.
	NextQueuedTurn(ctx context.Context, tenant, sessionID string) (*QueuedTurn, error)
	// QueuedTurns lists up to limit of the session's queued turns in the
	// order they will run (ErrNotFound for no live session).
	QueuedTurns(ctx context.Context, tenant, sessionID string, limit int) ([]*Turn, error)
	// EndQueuedTurn writes t's terminal status (cancelled or errored, with
	// its reason or error and end time) on a queued turn, which then never
	// runs, with events (its turn.created and turn.done) in the same
	// transaction. ErrTurnEnded when the turn is no longer queued,
	// ErrNotFound when there is no such turn.
	EndQueuedTurn(ctx context.Context, t *Turn, events []Event) error
	// QueuedSessions lists, across tenants, the oldest queued turn of each
	// session that has one and no running turn (recovery, and the sweep
	// that starts what a dead replica's turns left waiting).
	QueuedSessions(ctx context.Context) ([]TurnRef, error)
}

// MessageQuery selects messages along the branch ending at TipTurnID.
type MessageQuery struct {
	SessionID string
	TipTurnID string
	// ThreadID, when set, keeps only that thread's messages.
	ThreadID string
	// From, when set, keeps only messages with id >= From (a read from a
	// compaction tail); ErrNotFound when the session has no such message.
	From string
	ListOptions
}

// CompactionBoundary is the newest successful compaction along a branch:
// the user message carrying the compaction part, the summary answering it,
// and the first message of the verbatim tail the part points to.
type CompactionBoundary struct {
	RequestID   string `json:"request_message_id"`
	SummaryID   string `json:"summary_message_id"`
	TailStartID string `json:"tail_start_message_id"`
}

// CompactionData is the Data of a compaction part.
type CompactionData struct {
	// TailStartID is the id of the first message of the verbatim tail.
	TailStartID string `json:"tail_start_message_id"`
	// Auto is true for a compaction the turn loop started (threshold or
	// overflow), false for one asked for through POST /compact.
	Auto bool `json:"auto"`
	// Reason is "threshold", "overflow" or "manual".
	Reason string `json:"reason,omitempty"`
}

// MessageStore reads messages.
type MessageStore interface {
	// ListMessages returns messages with their parts, oldest first (in id
	// order), along the chain of turns ending at q.TipTurnID; messages that
	// belong to no turn are on every branch. The cursor is a position in id
	// order, so a cursor from another branch gives this branch's messages
	// after it. A page costs what it returns (and the messages of other
	// branches it passes), never the length of the chain before it.
	ListMessages(ctx context.Context, tenant string, q MessageQuery) ([]*Message, string, error)
	// TurnMessages returns the messages a turn wrote, with their parts.
	TurnMessages(ctx context.Context, tenant, turnID string) ([]*Message, error)
	// LatestCompaction returns the newest compaction boundary on q's
	// thread along the branch ending at q.TipTurnID: an assistant message
	// with Summary set and a finish other than "" and "error", whose parent
	// is a user message carrying a compaction part (its Data a
	// CompactionData). nil when there is none. Its cost is the summaries
	// the session holds after that one, never the length of the chain.
	// Paging fields of q are ignored.
	LatestCompaction(ctx context.Context, tenant string, q MessageQuery) (*CompactionBoundary, error)
	// TurnHistory reads LatestCompaction, a page of ListMessages (q's
	// Limit, after q's Cursor; its From is ignored) and GetSnapshot of
	// q.TipTurnID, which must be set, together: in one round trip where
	// the store can. It is what a turn reads to begin from a history it has
	// not cached, whole (no cursor) or after the part of it that it has
	// (another replica wrote the session last). ErrNotFound as those
	// methods give it (the session is not live, or has no such turn); a
	// tip without a snapshot is not an error.
	TurnHistory(ctx context.Context, tenant string, q MessageQuery) (*TurnHistory, error)
}

// TurnHistory is what MessageStore.TurnHistory reads.
type TurnHistory struct {
	// Boundary is the branch's newest compaction boundary; nil: none.
	Boundary *CompactionBoundary
	// Messages and Next are the page of the branch's messages after the
	// query's cursor, and the cursor of the next ("" when it is the last).
	Messages []*Message
	Next     string
	// Snapshot is the tip turn's; nil when it wrote none.
	Snapshot *Snapshot
}

// EventQuery selects stored events after a seq.
type EventQuery struct {
	SessionID string
	TurnID    string // optional
	After     int64
	// Before, when > 0, keeps events with seq < Before.
	Before int64
	Limit  int
}

// EventStore reads the persisted event log. The events of one write have
// seqs above every stored seq of their session (the sequencer assigns them
// in order, DESIGN.md): a write with a seq at or below the highest stored
// one, or with a seq twice, is ErrConflict and writes nothing. A stored
// event reads back byte for byte as it was written (envelope and data),
// whatever happened since to the rows it announced.
type EventStore interface {
	ListEvents(ctx context.Context, tenant string, q EventQuery) ([]Event, error)
}

// IdempotencyRecord binds an Idempotency-Key to the request first made
// with it and, once there is one, to that request's answer.
type IdempotencyRecord struct {
	Key   string
	Scope string
	// RequestHash identifies the request the key was first used with (a
	// hash of its method, path and canonical body): a later request with
	// the key and another hash is refused. "" for records from before
	// hashes were kept; they match any request.
	RequestHash string
	// Status is the answer's HTTP status; 0 while the first request has not
	// answered (see CompleteIdempotency).
	Status    int
	Body      []byte
	CreatedAt time.Time
	// ExpiresAt is when the record stops binding its key; the zero time
	// means never.
	ExpiresAt time.Time
}

// Live reports whether the record still binds its key at now.
func (r *IdempotencyRecord) Live(now time.Time) bool {
	return r.ExpiresAt.IsZero() || now.Before(r.ExpiresAt)
}

// IdempotencyStore remembers idempotent requests and their answers.
type IdempotencyStore interface {
	// PutIdempotency stores r unless the tenant has a record for its scope
	// and key that is still live at r.CreatedAt (an expired one is
	// replaced); it returns the stored record either way. Of racing puts,
	// exactly one stores its record and all get it back.
	PutIdempotency(ctx context.Context, tenant string, r *IdempotencyRecord) (*IdempotencyRecord, error)
	GetIdempotency(ctx context.Context, tenant, scope, key string) (*IdempotencyRecord, error)
	// CompleteIdempotency records the answer of the record for scope and
	// key unless it has one already (Status != 0), and returns the stored
	// record either way: of racing completions the first wins.
	// ErrNotFound when there is no record.
	CompleteIdempotency(ctx context.Context, tenant, scope, key string, status int, body []byte) (*IdempotencyRecord, error)
}
