package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// Messages are read with their parts in one query: the page of messages
// (a CTE named page) LEFT JOIN its parts, one row per part, in message
// then part id order. The join is LATERAL, an index lookup (parts_message)
// per message of the page (OFFSET 0 keeps the planner from flattening it):
// a plain join lets the planner hash every part of the tenant for a page
// of a hundred messages.
const pageWithParts = `
	SELECT m.id, m.session_id, m.turn_id, m.thread_id, m.role, m.parent_id, m.author, m.model, m.finish, m.usage,
		m.summary, m.created_at, m.metadata, m.origin, m.forum,
		p.id, p.message_id, p.session_id, p.turn_id, p.type, p.text, p.state, p.call_id, p.tool, p.arguments,
		p.output, p.error, p.data, p.provider, p.created_at, p.updated_at
	FROM page m LEFT JOIN LATERAL (SELECT * FROM parts WHERE tenant = $1 AND message_id = m.id OFFSET 0) p ON true
	ORDER BY m.id, p.id`

// scanPage reads the rows of a pageWithParts query.
func scanPage(rows pgx.Rows, tenant string) ([]*forge.Message, error) {
	var out []*forge.Message
	for rows.Next() {
		var (
			m                                    forge.Message
			usage, turn, meta, origin, forum     *string
			created                              time.Time
			pid, pmsg, pses, pturn, ptyp, pstate *string
			pcall, ptool, pargs, pdata, pprov    *string
			ptext, pout, perr                    *[]byte
			pcreated, pupdated                   *time.Time
		)
		if err := rows.Scan(&m.ID, &m.SessionID, &turn, &m.ThreadID, &m.Role, &m.ParentID, &m.Author, &m.Model,
			&m.Finish, &usage, &m.Summary, &created, &meta, &origin, &forum,
			&pid, &pmsg, &pses, &pturn, &ptyp, &ptext, &pstate, &pcall, &ptool, &pargs, &pout, &perr, &pdata, &pprov,
			&pcreated, &pupdated); err != nil {
			return nil, err
		}
		cur := (*forge.Message)(nil)
		if n := len(out); n > 0 && out[n-1].ID == m.ID {
			cur = out[n-1]
		} else {
			m.Tenant = tenant
			m.CreatedAt = utc(created)
			m.Parts = []*forge.Part{}
			if err := decJSON(usage, &m.Usage); err != nil {
				return nil, err
			}
			if err := decJSON(forum, &m.Forum); err != nil {
				return nil, err
			}
			if turn != nil {
				m.TurnID = *turn
			}
			if origin != nil {
				m.Origin = *origin
			}
			m.Metadata = fromRawText(meta)
			cur = &m
			out = append(out, cur)
		}
		if pid == nil {
			continue // a message without parts
		}
		p := &forge.Part{ID: *pid, MessageID: *pmsg, SessionID: *pses, TurnID: *pturn, Type: *ptyp,
			Text: string(*ptext), State: *pstate, CallID: *pcall, Tool: *ptool,
			Arguments: fromRawText(pargs), Output: fromOptBytes(pout), Error: fromOptBytes(perr),
			Data: fromRawText(pdata), Provider: fromRawText(pprov),
			CreatedAt: utc(*pcreated), UpdatedAt: utc(*pupdated)}
		cur.Parts = append(cur.Parts, p)
	}
	return out, rows.Err()
}

// turnExists queues a check of whether the session has the turn.
func turnExists(b *pgx.Batch, tenant, sessionID, turnID string, found *bool) {
	b.Queue(`SELECT EXISTS (SELECT FROM turns WHERE tenant = $1 AND session_id = $2 AND id = $3)`,
		tenant, sessionID, turnID).QueryRow(func(r pgx.Row) error { return r.Scan(found) })
}

// branchSegments is the recursive CTE seg(lin, hi) of the branch ending at
// turn $3 of session $2 (tenant $1): one row per lineage on it, with the
// depth the branch reaches in it (migration 0005), so a turn is on the
// branch when its lineage is a row's and its depth at most that row's. It
// takes one step per fork, however long the branch. UNION (not UNION ALL)
// stops on a cycle a corrupt chain could have.
const branchSegments = `seg(lin, hi) AS (
		SELECT lineage, depth FROM turns WHERE tenant = $1 AND id = $3 AND session_id = $2
		UNION
		SELECT p.lineage, p.depth FROM seg s
			JOIN turns f ON f.tenant = $1 AND f.id = s.lin
			JOIN turns p ON p.tenant = $1 AND p.id = f.previous_turn_id AND p.session_id = $2
	)`

// onBranch is the condition that the turn t (an alias of turns) is on the
// branch of branchSegments. Joined to the page's messages one by one (a
// primary-key lookup each) rather than as a subquery on turn ids, which
// the planner would answer with every turn of the branch.
func onBranch(t string) string {
	return `EXISTS (SELECT FROM seg WHERE seg.lin = ` + t + `.lineage AND ` + t + `.depth <= seg.hi)`
}

// branchPageSQL reads a page of a branch's messages with their parts.
// Each message's turn is looked up on its own (LATERAL, OFFSET 0), as
// its parts are: the page is then read in messages_session order and
// stops after limit rows whatever the statistics say. A plain join let
// the planner, with statistics older than the session's rows, hash the
// tenant's turns and read and sort every message of the tenant (any
// index on tenant serves that) for a page, generic plan or not.
// $1 tenant, $2 session, $3 tip turn, $4 cursor, $5 thread, $6 limit, $7
// from.
var branchPageSQL = `WITH RECURSIVE ` + branchSegments + `, page AS (
				SELECT m.* FROM messages m
					LEFT JOIN LATERAL (SELECT lineage, depth FROM turns WHERE tenant = $1 AND id = m.turn_id OFFSET 0) bt ON true
				WHERE m.tenant = $1 AND m.session_id = $2 AND m.id > $4 AND m.id >= $7
					AND (m.turn_id IS NULL OR ` + onBranch("bt") + `) AND ($5 = '' OR m.thread_id = $5)
				ORDER BY m.id LIMIT $6
			)` + pageWithParts

// turnlessPageSQL reads a page of the messages that belong to no turn.
// $1 tenant, $2 session, $3 cursor, $4 thread, $5 limit.
var turnlessPageSQL = `WITH page AS (
				SELECT * FROM messages m
				WHERE m.tenant = $1 AND m.session_id = $2 AND m.turn_id IS NULL AND m.id > $3
					AND ($4 = '' OR m.thread_id = $4)
				ORDER BY m.id LIMIT $5
			)` + pageWithParts

// ListMessages returns messages with their parts, oldest first, along the
// chain of turns ending at q.TipTurnID: a fork's sibling branches are not
// on the chain. The cursor is the last message id. A page reads the
// session's messages in id order from the cursor and keeps those of the
// branch's turns (each checked with one lookup, see branchSegments), so it
// costs what it returns plus the messages of other branches it skips,
// never the length of the chain before it.
func (s *Store) ListMessages(ctx context.Context, tenant string, q forge.MessageQuery) ([]*forge.Message, string, error) {
	limit := storeutil.Limit(q.Limit, storeutil.DefaultLimit)
	var (
		out     []*forge.Message
		tipSeen bool
	)
	b := batch(tenant)
	liveSession(b, tenant, q.SessionID)
	if q.TipTurnID != "" {
		queueBranchPage(b, tenant, q, limit, &out)
		turnExists(b, tenant, q.SessionID, q.TipTurnID, &tipSeen)
	} else {
		// No turn yet: the messages that belong to no turn (a forum's, the
		// copies in a monologue) are the whole history.
		b.Queue(turnlessPageSQL, tenant, q.SessionID, q.Cursor, q.ThreadID, limit+1).
			Query(func(rows pgx.Rows) error {
				var err error
				out, err = scanPage(rows, tenant)
				return err
			})
	}
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	if q.TipTurnID != "" && len(out) == 0 && !tipSeen {
		return nil, "", forge.Errorf(forge.ErrNotFound, "turn %s not found", q.TipTurnID)
	}
	out, next := storeutil.Page(out, limit, func(m *forge.Message) string { return m.ID })
	return out, next, nil
}

// queueBranchPage queues the page of q's branch (q.TipTurnID set) after
// q.Cursor, from q.From, with limit+1 rows (storeutil.Page's), read into
// *out when b runs.
func queueBranchPage(b *pgx.Batch, tenant string, q forge.MessageQuery, limit int, out *[]*forge.Message) {
	if q.From != "" {
		b.Queue(`SELECT EXISTS (SELECT FROM messages WHERE tenant = $1 AND id = $2 AND session_id = $3)`,
			tenant, q.From, q.SessionID).QueryRow(func(r pgx.Row) error {
			var ok bool
			if err := r.Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return forge.Errorf(forge.ErrNotFound, "message %s not found", q.From)
			}
			return nil
		})
	}
	// Messages that belong to no turn (forum messages, copies in a
	// monologue) are on every branch.
	b.Queue(branchPageSQL, tenant, q.SessionID, q.TipTurnID, q.Cursor, q.ThreadID, limit+1, q.From).
		Query(func(rows pgx.Rows) error {
			var err error
			*out, err = scanPage(rows, tenant)
			return err
		})
}

// TurnHistory reads the boundary, a page of the branch and the tip's
// snapshot in one batch: one round trip where LatestCompaction,
// ListMessages and GetSnapshot cost three. The page is read whether or not
// there is a boundary (the caller reads the view anew when there is a new
// one: compactions are rare, and the page is q's Limit at most).
func (s *Store) TurnHistory(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.TurnHistory, error) {
	if q.TipTurnID == "" {
		return nil, forge.Errorf(forge.ErrInvalid, "turn history: no tip turn")
	}
	q.From = ""
	limit := storeutil.Limit(q.Limit, storeutil.DefaultLimit)
	var (
		h                  forge.TurnHistory
		bound              boundaryRow
		tipSeen, snapFound bool
		snapBody           string
	)
	b := batch(tenant)
	liveSession(b, tenant, q.SessionID)
	queueCompaction(b, tenant, q, &bound)
	queueBranchPage(b, tenant, q, limit, &h.Messages)
	turnExists(b, tenant, q.SessionID, q.TipTurnID, &tipSeen)
	b.Queue(snapshotSQL, tenant, q.TipTurnID).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&snapBody); err != nil {
					return err
				}
				snapFound = true
			}
			return rows.Err()
		})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	if !tipSeen && !bound.found {
		return nil, forge.Errorf(forge.ErrNotFound, "turn %s not found", q.TipTurnID)
	}
	var err error
	if h.Boundary, err = bound.boundary(); err != nil {
		return nil, err
	}
	h.Messages, h.Next = storeutil.Page(h.Messages, limit, func(m *forge.Message) string { return m.ID })
	if snapFound {
		if h.Snapshot, err = decodeSnapshot(q.TipTurnID, snapBody); err != nil {
			return nil, err
		}
	}
	return &h, nil
}

// TurnMessages returns the messages a turn wrote, with their parts.
func (s *Store) TurnMessages(ctx context.Context, tenant, turnID string) ([]*forge.Message, error) {
	var (
		out  []*forge.Message
		seen bool
	)
	b := batch(tenant)
	b.Queue(`WITH page AS (SELECT * FROM messages WHERE tenant = $1 AND turn_id = $2)`+pageWithParts, tenant, turnID).
		Query(func(rows pgx.Rows) error {
			var err error
			out, err = scanPage(rows, tenant)
			return err
		})
	b.Queue(`SELECT EXISTS (SELECT FROM turns WHERE tenant = $1 AND id = $2)`, tenant, turnID).
		QueryRow(func(r pgx.Row) error { return r.Scan(&seen) })
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	if len(out) == 0 && !seen {
		return nil, forge.Errorf(forge.ErrNotFound, "turn %s not found", turnID)
	}
	return out, nil
}

// LatestCompaction returns the newest compaction boundary along the branch:
// the session's summaries are read newest first (messages_summary) and the
// first on the branch whose parent carries a compaction part is it, so its
// cost is the summaries after it, never the length of the chain.
func (s *Store) LatestCompaction(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.CompactionBoundary, error) {
	var (
		bound   boundaryRow
		tipSeen bool
	)
	b := batch(tenant)
	liveSession(b, tenant, q.SessionID)
	if q.TipTurnID != "" {
		queueCompaction(b, tenant, q, &bound)
		turnExists(b, tenant, q.SessionID, q.TipTurnID, &tipSeen)
	}
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	switch {
	case q.TipTurnID == "":
		return nil, nil
	case !bound.found && !tipSeen:
		return nil, forge.Errorf(forge.ErrNotFound, "turn %s not found", q.TipTurnID)
	}
	return bound.boundary()
}

// boundaryRow is the row queueCompaction reads: the summary, its parent
// (the request) and the request's compaction part's data.
type boundaryRow struct {
	summary, request, data *string
	found                  bool
}

// boundary is the row's boundary; nil when no row was found.
func (r *boundaryRow) boundary() (*forge.CompactionBoundary, error) {
	if !r.found {
		return nil, nil
	}
	var raw []byte
	if r.data != nil {
		raw = []byte(*r.data)
	}
	out, err := storeutil.Boundary(*r.request, *r.summary, raw)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return out, nil
}

// queueCompaction queues the read of the newest compaction boundary of
// q's branch (q.TipTurnID set) into *r.
func queueCompaction(b *pgx.Batch, tenant string, q forge.MessageQuery, r *boundaryRow) {
	b.Queue(`WITH RECURSIVE `+branchSegments+`
			SELECT s.id, s.parent_id, p.data FROM messages s
				JOIN parts p ON p.tenant = s.tenant AND p.message_id = s.parent_id AND p.type = 'compaction'
				JOIN turns bt ON bt.tenant = $1 AND bt.id = s.turn_id
			WHERE s.tenant = $1 AND s.session_id = $2 AND s.summary AND s.finish NOT IN ('', 'error')
				AND ($4 = '' OR s.thread_id = $4) AND `+onBranch("bt")+`
			ORDER BY s.id DESC LIMIT 1`, tenant, q.SessionID, q.TipTurnID, q.ThreadID).
		Query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&r.summary, &r.request, &r.data); err != nil {
					return err
				}
				r.found = true
			}
			return rows.Err()
		})
}
