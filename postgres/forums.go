package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

const participantCols = `id, session_id, actor, actor_id, trigger, monologue_id, joined_at, left_at`

func scanParticipant(sc pgx.Row, tenant string) (*forge.Participant, error) {
	var (
		p      forge.Participant
		actor  string
		mono   *string
		joined time.Time
		left   *time.Time
	)
	if err := sc.Scan(&p.ID, &p.ForumID, &actor, &p.ActorID, &p.Trigger, &mono, &joined, &left); err != nil {
		return nil, err
	}
	p.Tenant = tenant
	if err := json.Unmarshal([]byte(actor), &p.Actor); err != nil {
		return nil, err
	}
	if mono != nil {
		p.Metadata.MonologueID = *mono
	}
	p.JoinedAt, p.LeftAt = utc(joined), utcPtr(left)
	return &p, nil
}

func scanParticipants(rows pgx.Rows, tenant string, out *[]*forge.Participant) error {
	for rows.Next() {
		p, err := scanParticipant(rows, tenant)
		if err != nil {
			return err
		}
		*out = append(*out, p)
	}
	return rows.Err()
}

// checkForum queues a check, aborting the batch, that the forum is live.
func checkForum(b *pgx.Batch, tenant, id string) {
	b.Queue(`SELECT check_found(EXISTS (SELECT FROM sessions WHERE tenant = $1 AND id = $2 AND kind = 'forum'
		AND deleted_at IS NULL), 'forum ' || $2 || ' not found')`, tenant, id)
}

// AddParticipant inserts a stint (and its monologue) with its events.
func (s *Store) AddParticipant(ctx context.Context, p *forge.Participant, monologue *forge.Session, events []forge.Event) error {
	if err := storeutil.CheckParticipant(p); err != nil {
		return err
	}
	actor, err := json.Marshal(p.Actor)
	if err != nil {
		return err
	}
	packs, err := s.plainLog(events, "")
	if err != nil {
		return err
	}
	p.JoinedAt = storeutil.OrNow(p.JoinedAt, s.now)
	b := batch(p.Tenant)
	checkForum(b, p.Tenant, p.ForumID)
	if monologue != nil {
		m := storeutil.Monologue(*monologue, s.now)
		if err := queueSession(b, &m); err != nil {
			return err
		}
	}
	b.Queue(`INSERT INTO participants (tenant, id, session_id, actor_type, actor_id, actor, trigger, monologue_id,
		joined_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		p.Tenant, p.ID, p.ForumID, p.Actor.Type, p.ActorID, string(actor), p.Trigger,
		nullStr(p.Metadata.MonologueID), p.JoinedAt)
	queuePacks(b, scope{tenant: p.Tenant, session: p.ForumID}, packs)
	err = s.write(ctx, b)
	if err != nil && forge.ErrorCode(err) == "conflict" {
		return forge.Errorf(forge.ErrConflict, "%s already has an active stint in forum %s", p.ActorID, p.ForumID)
	}
	return err
}

// EndParticipant ends an active stint.
func (s *Store) EndParticipant(ctx context.Context, tenant, forumID, participantID string, at time.Time, events []forge.Event) (*forge.Participant, bool, error) {
	packs, err := s.plainLog(events, "")
	if err != nil {
		return nil, false, err
	}
	a := arraysOf(packs)
	var first int64
	if len(packs) > 0 {
		first = packs[0].First
	}
	var (
		out   *forge.Participant
		ended int
	)
	b := batch(tenant)
	b.Queue(`WITH upd AS (
			UPDATE participants SET left_at = $4 WHERE tenant = $1 AND session_id = $2 AND id = $3 AND left_at IS NULL
			RETURNING id
		), ins AS (
			INSERT INTO event_log (tenant, session_id, first_seq, last_seq, turn_id, body)
			SELECT $1, $2, u.f, u.l, u.t, u.b FROM unnest($5::bigint[], $6::bigint[], $7::text[], $8::bytea[]) AS u(f, l, t, b)
			WHERE CASE WHEN cardinality($5::bigint[]) > 0 AND EXISTS (SELECT FROM upd) THEN event_log_above($2, $9) ELSE false END
		)
		SELECT count(*) FROM upd`, tenant, forumID, participantID, at, a.first, a.last, a.turn, a.body, first).
		QueryRow(func(r pgx.Row) error { return r.Scan(&ended) })
	b.Queue(`SELECT `+participantCols+` FROM participants WHERE tenant = $1 AND session_id = $2 AND id = $3`,
		tenant, forumID, participantID).QueryRow(func(r pgx.Row) error {
		var err error
		out, err = scanParticipant(r, tenant)
		return notFound(err, "member %s not found in forum %s", participantID, forumID)
	})
	if err := s.write(ctx, b); err != nil {
		return nil, false, err
	}
	return out, ended == 1, nil
}

// GetParticipant returns a stint of a live forum.
func (s *Store) GetParticipant(ctx context.Context, tenant, forumID, participantID string) (*forge.Participant, error) {
	var out *forge.Participant
	b := batch(tenant)
	checkForum(b, tenant, forumID)
	b.Queue(`SELECT `+participantCols+` FROM participants WHERE tenant = $1 AND session_id = $2 AND id = $3`,
		tenant, forumID, participantID).QueryRow(func(r pgx.Row) error {
		var err error
		out, err = scanParticipant(r, tenant)
		return notFound(err, "member %s not found in forum %s", participantID, forumID)
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// ListParticipants lists a forum's stints, oldest first.
func (s *Store) ListParticipants(ctx context.Context, tenant, forumID string, all bool, opts forge.ListOptions) ([]*forge.Participant, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Participant
	b := batch(tenant)
	checkForum(b, tenant, forumID)
	b.Queue(`SELECT `+participantCols+` FROM participants
		WHERE tenant = $1 AND session_id = $2 AND id > $3 AND ($4 OR left_at IS NULL) ORDER BY id LIMIT $5`,
		tenant, forumID, opts.Cursor, all, limit+1).Query(func(rows pgx.Rows) error { return scanParticipants(rows, tenant, &out) })
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(p *forge.Participant) string { return p.ID })
	return out, next, nil
}

// ActiveAgentStints lists every active agent stint of every live forum:
// their ids through the SECURITY DEFINER function active_agent_stints,
// then the stints tenant by tenant through the ordinary policy (byRef).
func (s *Store) ActiveAgentStints(ctx context.Context) ([]*forge.Participant, error) {
	var out []*forge.Participant
	err := s.byRef(ctx, `SELECT tenant, id FROM active_agent_stints()`, func(b *pgx.Batch, tenant string, ids []string) {
		b.Queue(`SELECT p.id, p.session_id, p.actor, p.actor_id, p.trigger, p.monologue_id, p.joined_at, p.left_at
			FROM participants p JOIN sessions f ON f.tenant = p.tenant AND f.id = p.session_id AND f.deleted_at IS NULL
			WHERE p.tenant = $1 AND p.id = ANY($2) AND p.left_at IS NULL ORDER BY p.id`, tenant, ids).
			Query(func(rows pgx.Rows) error { return scanParticipants(rows, tenant, &out) })
	})
	return out, err
}

// AppendLoose writes turnless messages and their events in one transaction.
func (s *Store) AppendLoose(ctx context.Context, a *forge.LooseAppend) error {
	if err := storeutil.CheckLoose(a); err != nil {
		return err
	}
	parts := &partRows{}
	msgs, err := s.encodeMessages(a.Messages, parts)
	if err != nil {
		return err
	}
	// Packed without rows: packing them against their messages would take
	// reading the messages back first.
	evs, err := s.prepareEvents(a.Events)
	if err != nil {
		return err
	}
	var packs []eventpack.Pack
	if len(evs) > 0 {
		if packs, err = eventpack.Plain(evs, ""); err != nil {
			return err
		}
	}
	sc := scope{tenant: a.Tenant, session: a.SessionID}
	b := batch(a.Tenant)
	b.Queue(`SELECT check_found(EXISTS (SELECT FROM sessions WHERE tenant = $1 AND id = $2 AND deleted_at IS NULL),
		'session ' || $2 || ' not found')`, a.Tenant, a.SessionID)
	queueMessages(b, insertMessagesSQL, sc, msgs)
	queueParts(b, insertPartsSQL, sc, parts)
	queuePacks(b, sc, packs)
	delivered, err := s.queueWebhooks(b, sc, evs)
	if err != nil {
		return err
	}
	for _, r := range a.Mark {
		b.Queue(`UPDATE messages SET metadata = jsonb_set(coalesce(metadata, '{}')::jsonb, '{type}', to_jsonb($4::text))::text
			WHERE tenant = $1 AND session_id = $2 AND id = $3`, a.Tenant, r.SessionID, r.MessageID, r.MarkType())
	}
	if err := s.write(ctx, b); err != nil {
		return err
	}
	delivered()
	return nil
}

// MessageByOrigin returns the session's message of that origin.
func (s *Store) MessageByOrigin(ctx context.Context, tenant, sessionID, origin string) (*forge.Message, error) {
	var out []*forge.Message
	b := batch(tenant)
	b.Queue(`WITH page AS (SELECT * FROM messages WHERE tenant = $1 AND session_id = $2 AND origin = $3)`+pageWithParts,
		tenant, sessionID, origin).Query(func(rows pgx.Rows) error {
		var err error
		out, err = scanPage(rows, tenant)
		return err
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, forge.Errorf(forge.ErrNotFound, "no message of origin %s in session %s", origin, sessionID)
	}
	return out[0], nil
}

// ListLoose lists a session's turnless messages, oldest first.
func (s *Store) ListLoose(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Message, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Message
	b := batch(tenant)
	liveSession(b, tenant, sessionID)
	b.Queue(`WITH page AS (SELECT * FROM messages WHERE tenant = $1 AND session_id = $2 AND turn_id IS NULL AND id > $3
		ORDER BY id LIMIT $4)`+pageWithParts, tenant, sessionID, opts.Cursor, limit+1).Query(func(rows pgx.Rows) error {
		var err error
		out, err = scanPage(rows, tenant)
		return err
	})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(m *forge.Message) string { return m.ID })
	return out, next, nil
}

// LastLoose returns up to n of the session's newest turnless messages.
func (s *Store) LastLoose(ctx context.Context, tenant, sessionID string, n int) ([]*forge.Message, error) {
	var out []*forge.Message
	b := batch(tenant)
	liveSession(b, tenant, sessionID)
	b.Queue(`WITH page AS (SELECT * FROM messages WHERE tenant = $1 AND session_id = $2 AND turn_id IS NULL
		ORDER BY id DESC LIMIT $3)`+pageWithParts, tenant, sessionID, n).Query(func(rows pgx.Rows) error {
		var err error
		out, err = scanPage(rows, tenant)
		return err
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return out, nil
}

// SwapMonologue creates the new monologue with its seed and moves the
// stint's pointer to it, if it still points at the old one.
func (s *Store) SwapMonologue(ctx context.Context, w *forge.MonologueSwap) error {
	nm, err := storeutil.SwapMonologue(w, s.now)
	if err != nil {
		return err
	}
	parts := &partRows{}
	msgs, err := s.encodeMessages(w.Seed, parts)
	if err != nil {
		return err
	}
	packs, err := s.plainLog(w.Events, "")
	if err != nil {
		return err
	}
	b := batch(w.Tenant)
	b.Queue(`WITH upd AS (
			UPDATE participants SET monologue_id = $5 WHERE tenant = $1 AND session_id = $2 AND id = $3
				AND left_at IS NULL AND monologue_id = $4 RETURNING id
		) SELECT check_conflict(EXISTS (SELECT FROM upd), 'member ' || $3 || ' no longer has monologue ' || $4)`,
		w.Tenant, w.ForumID, w.ParticipantID, w.OldID, nm.ID)
	if err := queueSession(b, &nm); err != nil {
		return err
	}
	sc := scope{tenant: w.Tenant, session: nm.ID}
	queueMessages(b, insertMessagesSQL, sc, msgs)
	queueParts(b, insertPartsSQL, sc, parts)
	queuePacks(b, scope{tenant: w.Tenant, session: w.ForumID}, packs)
	return s.write(ctx, b)
}
