package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

const participantCols = `id, session_id, actor, actor_id, trigger, metadata, joined_at, left_at`

func scanParticipant(sc interface{ Scan(...any) error }, tenant string) (*forge.Participant, error) {
	var (
		p           forge.Participant
		actor, meta string
		joined      int64
		left        sql.NullInt64
	)
	if err := sc.Scan(&p.ID, &p.ForumID, &actor, &p.ActorID, &p.Trigger, &meta, &joined, &left); err != nil {
		return nil, err
	}
	p.Tenant = tenant
	if err := json.Unmarshal([]byte(actor), &p.Actor); err != nil {
		return nil, dbErr(err)
	}
	if err := json.Unmarshal([]byte(meta), &p.Metadata); err != nil {
		return nil, dbErr(err)
	}
	p.JoinedAt, p.LeftAt = fromNano(joined), fromNullNano(left)
	return &p, nil
}

// liveForum checks that the forum exists, is live and is a forum.
func liveForum(x *tx, tenant, id string) error {
	var kind string
	err := x.queryRow(`SELECT kind FROM sessions WHERE tenant = ? AND id = ? AND deleted_at IS NULL`, tenant, id).Scan(&kind)
	if err != nil {
		return notFound(err, "forum %s not found", id)
	}
	if kind != forge.KindForum {
		return forge.Errorf(forge.ErrNotFound, "forum %s not found", id)
	}
	return nil
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
	meta, err := json.Marshal(p.Metadata)
	if err != nil {
		return err
	}
	sc := scope{tenant: p.Tenant, session: p.ForumID}
	packs, err := s.plainLog(events)
	if err != nil {
		return err
	}
	p.JoinedAt = storeutil.OrNow(p.JoinedAt, s.now)
	return s.write(ctx, func(x *tx) error {
		if err := liveForum(x, p.Tenant, p.ForumID); err != nil {
			return err
		}
		if monologue != nil {
			m := storeutil.Monologue(*monologue, s.now)
			if err := insertSession(x, &m); err != nil {
				return err
			}
		}
		_, err := x.exec(`INSERT INTO participants (tenant, id, session_id, actor_type, actor_id, actor, trigger,
			metadata, joined_at, left_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)`,
			p.Tenant, p.ID, p.ForumID, p.Actor.Type, p.ActorID, string(actor), p.Trigger, string(meta), unixNano(p.JoinedAt))
		if _, ok := isUnique(err); ok {
			return forge.Errorf(forge.ErrConflict, "%s already has an active stint in forum %s", p.ActorID, p.ForumID)
		}
		if err != nil {
			return dbErr(err)
		}
		return s.insertLog(x, sc, packs)
	})
}

// EndParticipant ends an active stint.
func (s *Store) EndParticipant(ctx context.Context, tenant, forumID, participantID string, at time.Time, events []forge.Event) (*forge.Participant, bool, error) {
	packs, err := s.plainLog(events)
	if err != nil {
		return nil, false, err
	}
	var (
		out   *forge.Participant
		ended bool
	)
	err = s.write(ctx, func(x *tx) error {
		res, err := x.exec(`UPDATE participants SET left_at = ? WHERE tenant = ? AND session_id = ? AND id = ? AND left_at IS NULL`,
			unixNano(at), tenant, forumID, participantID)
		if err != nil {
			return dbErr(err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			ended = true
			if err := s.insertLog(x, scope{tenant: tenant, session: forumID}, packs); err != nil {
				return err
			}
		}
		out, err = scanParticipant(x.queryRow(`SELECT `+participantCols+` FROM participants
			WHERE tenant = ? AND session_id = ? AND id = ?`, tenant, forumID, participantID), tenant)
		return notFound(err, "member %s not found in forum %s", participantID, forumID)
	})
	if err != nil {
		return nil, false, err
	}
	return out, ended, nil
}

// GetParticipant returns a stint of a live forum.
func (s *Store) GetParticipant(ctx context.Context, tenant, forumID, participantID string) (*forge.Participant, error) {
	var out *forge.Participant
	err := s.read(ctx, func(x *tx) error {
		if err := liveForum(x, tenant, forumID); err != nil {
			return err
		}
		var err error
		out, err = scanParticipant(x.queryRow(`SELECT `+participantCols+` FROM participants
			WHERE tenant = ? AND session_id = ? AND id = ?`, tenant, forumID, participantID), tenant)
		return notFound(err, "member %s not found in forum %s", participantID, forumID)
	})
	return out, err
}

// ListParticipants lists a forum's stints, oldest first.
func (s *Store) ListParticipants(ctx context.Context, tenant, forumID string, all bool, opts forge.ListOptions) ([]*forge.Participant, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Participant
	err := s.read(ctx, func(x *tx) error {
		if err := liveForum(x, tenant, forumID); err != nil {
			return err
		}
		rows, err := x.query(`SELECT `+participantCols+` FROM participants
			WHERE tenant = ? AND session_id = ? AND id > ? AND (? OR left_at IS NULL) ORDER BY id LIMIT ?`,
			tenant, forumID, opts.Cursor, all, limit+1)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			p, err := scanParticipant(rows, tenant)
			if err != nil {
				return dbErr(err)
			}
			out = append(out, p)
		}
		return dbErr(rows.Err())
	})
	if err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(p *forge.Participant) string { return p.ID })
	return out, next, nil
}

// ActiveAgentStints lists every active agent stint of every live forum.
func (s *Store) ActiveAgentStints(ctx context.Context) ([]*forge.Participant, error) {
	var out []*forge.Participant
	err := s.read(ctx, func(x *tx) error {
		rows, err := x.query(`SELECT p.tenant, p.id, p.session_id, p.actor, p.actor_id, p.trigger, p.metadata, p.joined_at, p.left_at FROM participants p
			JOIN sessions f ON f.tenant = p.tenant AND f.id = p.session_id AND f.deleted_at IS NULL
			WHERE p.left_at IS NULL AND p.actor_type = 'agent' ORDER BY p.id`)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			var tenant string
			p, err := scanParticipant(scanFunc(func(dst ...any) error { return rows.Scan(append([]any{&tenant}, dst...)...) }), "")
			if err != nil {
				return dbErr(err)
			}
			p.Tenant = tenant
			out = append(out, p)
		}
		return dbErr(rows.Err())
	})
	return out, err
}

type scanFunc func(dst ...any) error

func (f scanFunc) Scan(dst ...any) error { return f(dst...) }

// AppendLoose writes turnless messages and their events in one transaction.
func (s *Store) AppendLoose(ctx context.Context, a *forge.LooseAppend) error {
	if err := storeutil.CheckLoose(a); err != nil {
		return err
	}
	sc := scope{tenant: a.Tenant, session: a.SessionID}
	mrows, prows, err := s.encodeMessages(sc, a.Messages, true)
	if err != nil {
		return err
	}
	evs, err := s.prepareEvents(a.Events)
	if err != nil {
		return err
	}
	msgIDs := make([]string, len(a.Messages))
	for i, m := range a.Messages {
		msgIDs[i] = m.ID
	}
	return s.write(ctx, func(x *tx) error {
		if err := liveSession(x, a.Tenant, a.SessionID); err != nil {
			return err
		}
		for _, m := range a.Messages {
			if m.Origin == "" {
				continue
			}
			var one int
			err := x.queryRow(`SELECT 1 FROM messages WHERE tenant = ? AND session_id = ? AND origin = ?`,
				a.Tenant, a.SessionID, m.Origin).Scan(&one)
			if err == nil {
				return forge.Errorf(forge.ErrConflict, "session %s already holds a message of origin %s", a.SessionID, m.Origin)
			}
			if err != sql.ErrNoRows {
				return dbErr(err)
			}
		}
		if err := insertMessages(x, mrows, prows); err != nil {
			return err
		}
		if len(evs) > 0 {
			// The messages just written are as they will stay.
			packs, err := looseLog(x, sc, evs, msgIDs)
			if err != nil {
				return err
			}
			if err := s.insertLog(x, sc, packs); err != nil {
				return err
			}
			if err := s.queueWebhooks(x, sc, evs); err != nil {
				return err
			}
		}
		for _, r := range a.Mark {
			_, err := x.exec(`UPDATE messages SET metadata = json_set(coalesce(metadata, '{}'), '$.type', ?)
				WHERE tenant = ? AND session_id = ? AND id = ?`, r.MarkType(), a.Tenant, r.SessionID, r.MessageID)
			if err != nil {
				return dbErr(err)
			}
		}
		return nil
	})
}

// MessageByOrigin returns the session's message of that origin.
func (s *Store) MessageByOrigin(ctx context.Context, tenant, sessionID, origin string) (*forge.Message, error) {
	var out []*forge.Message
	err := s.read(ctx, func(x *tx) error {
		rows, err := x.query(`SELECT `+msgCols+` FROM messages m WHERE m.tenant = ? AND m.session_id = ? AND m.origin = ?`,
			tenant, sessionID, origin)
		if err != nil {
			return dbErr(err)
		}
		if out, err = scanMessages(rows, tenant); err != nil {
			return err
		}
		if len(out) == 0 {
			return forge.Errorf(forge.ErrNotFound, "no message of origin %s in session %s", origin, sessionID)
		}
		return loadParts(x, tenant, out)
	})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// ListLoose lists a session's turnless messages, oldest first.
func (s *Store) ListLoose(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Message, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Message
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, sessionID); err != nil {
			return err
		}
		rows, err := x.query(`SELECT `+msgCols+` FROM messages m
			WHERE m.tenant = ? AND m.session_id = ? AND m.turn_id IS NULL AND m.id > ? ORDER BY m.id LIMIT ?`,
			tenant, sessionID, opts.Cursor, limit+1)
		if err != nil {
			return dbErr(err)
		}
		if out, err = scanMessages(rows, tenant); err != nil {
			return err
		}
		return loadParts(x, tenant, out[:min(limit, len(out))])
	})
	if err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(m *forge.Message) string { return m.ID })
	return out, next, nil
}

// LastLoose returns up to n of the session's newest turnless messages.
func (s *Store) LastLoose(ctx context.Context, tenant, sessionID string, n int) ([]*forge.Message, error) {
	var out []*forge.Message
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, sessionID); err != nil {
			return err
		}
		rows, err := x.query(`SELECT * FROM (SELECT `+msgCols+` FROM messages m
			WHERE m.tenant = ? AND m.session_id = ? AND m.turn_id IS NULL ORDER BY m.id DESC LIMIT ?) ORDER BY id`,
			tenant, sessionID, n)
		if err != nil {
			return dbErr(err)
		}
		if out, err = scanMessages(rows, tenant); err != nil {
			return err
		}
		return loadParts(x, tenant, out)
	})
	return out, err
}

// SwapMonologue creates the new monologue with its seed and moves the
// stint's pointer to it, if it still points at the old one.
func (s *Store) SwapMonologue(ctx context.Context, w *forge.MonologueSwap) error {
	nm, err := storeutil.SwapMonologue(w, s.now)
	if err != nil {
		return err
	}
	mrows, prows, err := s.encodeMessages(scope{tenant: w.Tenant, session: nm.ID}, w.Seed, true)
	if err != nil {
		return err
	}
	packs, err := s.plainLog(w.Events)
	if err != nil {
		return err
	}
	meta, err := json.Marshal(forge.ParticipantMetadata{MonologueID: nm.ID})
	if err != nil {
		return err
	}
	return s.write(ctx, func(x *tx) error {
		res, err := x.exec(`UPDATE participants SET metadata = ? WHERE tenant = ? AND session_id = ? AND id = ?
			AND left_at IS NULL AND json_extract(metadata, '$.monologue_id') = ?`,
			string(meta), w.Tenant, w.ForumID, w.ParticipantID, w.OldID)
		if err != nil {
			return dbErr(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return forge.Errorf(forge.ErrConflict, "member %s no longer has monologue %s", w.ParticipantID, w.OldID)
		}
		if err := insertSession(x, &nm); err != nil {
			return err
		}
		if err := insertMessages(x, mrows, prows); err != nil {
			return err
		}
		return s.insertLog(x, scope{tenant: w.Tenant, session: w.ForumID}, packs)
	})
}
