package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// scope is the tenant, session and turn every row of one write belongs to;
// rows are stamped with it whatever their own fields say.
type scope struct {
	tenant, session, turn string
}

// encodeMessages encodes message envelopes, and their parts when withParts.
func (s *Store) encodeMessages(sc scope, msgs []*forge.Message, withParts bool) (mrows, prows [][]any, err error) {
	now := s.now()
	for _, m := range msgs {
		if err := storeutil.CheckMessage(m); err != nil {
			return nil, nil, err
		}
		usage, err := encJSON(m.Usage)
		if err != nil {
			return nil, nil, err
		}
		summary := 0
		if m.Summary {
			summary = 1
		}
		created := storeutil.Or(m.CreatedAt, now)
		forum, err := encJSON(m.Forum)
		if err != nil {
			return nil, nil, err
		}
		mrows = append(mrows, []any{sc.tenant, m.ID, sc.session, nullStr(sc.turn), m.ThreadID, m.Role, strPtr(m.ParentID),
			m.Author, m.Model, m.Finish, usage, summary, unixNano(created), rawText(m.Metadata), nullStr(m.Origin), forum})
		if withParts {
			ps, err := s.encodeParts(sc, m.ID, m.Parts)
			if err != nil {
				return nil, nil, err
			}
			prows = append(prows, ps...)
		}
	}
	return mrows, prows, nil
}

// encodeParts encodes parts; messageID, when set, overrides each part's.
func (s *Store) encodeParts(sc scope, messageID string, parts []*forge.Part) ([][]any, error) {
	now := s.now()
	out := make([][]any, 0, len(parts))
	for _, p := range parts {
		mid, err := storeutil.PartMessage(p, messageID)
		if err != nil {
			return nil, err
		}
		created, updated := storeutil.Or(p.CreatedAt, now), storeutil.Or(p.UpdatedAt, now)
		out = append(out, []any{sc.tenant, p.ID, mid, p.Type, p.Text, p.State, p.CallID,
			p.Tool, rawText(p.Arguments), strPtr(p.Output), strPtr(p.Error), rawText(p.Data), rawText(p.Provider),
			unixNano(created), unixNano(updated)})
	}
	return out, nil
}

// Rows go in multi-row INSERTs of up to maxRowsPerStmt rows: executing a
// statement costs more than a row.
var (
	messageInsert = newMultiInsert("message", `INSERT INTO messages (tenant, id, session_id, turn_id,
		thread_id, role, parent_id, author, model, finish, usage, summary, created_at, metadata, origin, forum) VALUES `, 16, "")
	messageUpsert = newMultiInsert("message", messageInsert.head, 16, ` ON CONFLICT (tenant, id) DO UPDATE SET
		parent_id = excluded.parent_id, author = excluded.author, model = excluded.model,
		finish = excluded.finish, usage = excluded.usage, summary = excluded.summary`)
	// A part is its message's: its session and turn are the message's.
	partInsert = newMultiInsert("part", `INSERT INTO parts (tenant, id, message_id, type,
		text, state, call_id, tool, arguments, output, error, data, provider, created_at, updated_at) VALUES `, 15, "")
	partUpsert = newMultiInsert("part", partInsert.head, 15, ` ON CONFLICT (tenant, message_id, id) DO UPDATE SET
		type = excluded.type, text = excluded.text, state = excluded.state, call_id = excluded.call_id,
		tool = excluded.tool, arguments = excluded.arguments, output = excluded.output, error = excluded.error,
		data = excluded.data, provider = excluded.provider, updated_at = excluded.updated_at`)
)

// insertMessages inserts new messages and their parts (BeginTurn).
func insertMessages(x *tx, mrows, prows [][]any) error {
	if err := messageInsert.exec(x, mrows); err != nil {
		return err
	}
	return partInsert.exec(x, prows)
}

// upsertMessages inserts or updates envelopes: a message's finish, usage
// and model are set when its model call ends.
func upsertMessages(x *tx, mrows [][]any) error { return messageUpsert.exec(x, mrows) }

// upsertParts inserts or rewrites parts: a streaming part is written empty,
// checkpointed, then rewritten whole at its end.
func upsertParts(x *tx, prows [][]any) error { return partUpsert.exec(x, prows) }

const maxRowsPerStmt = 32

// multiInsert is an INSERT of 1 to maxRowsPerStmt rows, its query text
// built once per row count.
type multiInsert struct {
	what    string
	head    string
	queries [maxRowsPerStmt + 1]string
}

func newMultiInsert(what, head string, cols int, tail string) *multiInsert {
	m := &multiInsert{what: what, head: head}
	tuple := "(?" + strings.Repeat(", ?", cols-1) + ")"
	var b strings.Builder
	b.WriteString(head)
	for n := 1; n <= maxRowsPerStmt; n++ {
		if n > 1 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
		m.queries[n] = b.String() + tail
	}
	return m
}

// exec writes rows. A duplicate key is ErrConflict naming the row by its
// second value (its id, or an event's seq).
func (m *multiInsert) exec(x *tx, rows [][]any) error {
	for len(rows) > 0 {
		n := min(len(rows), maxRowsPerStmt)
		if err := x.execRows(m.queries[n], rows[:n]); err != nil {
			if _, ok := isUnique(err); !ok {
				return dbErr(err)
			}
			if n > 1 {
				// The statement wrote nothing; one row at a time, the
				// culprit fails again and is named.
				for _, r := range rows[:n] {
					if err := m.exec(x, [][]any{r}); err != nil {
						return err
					}
				}
			}
			return forge.Errorf(forge.ErrConflict, "%s %v already exists", m.what, rows[0][1])
		}
		rows = rows[n:]
	}
	return nil
}

const msgCols = `m.id, m.session_id, m.turn_id, m.thread_id, m.role, m.parent_id, m.author, m.model,
	m.finish, m.usage, m.summary, m.created_at, m.metadata, m.origin, m.forum`

func scanMessages(rows rowIter, tenant string) ([]*forge.Message, error) {
	defer rows.Close()
	var out []*forge.Message
	for rows.Next() {
		m := &forge.Message{Tenant: tenant, Parts: []*forge.Part{}}
		var (
			parent, usage, turn, meta, origin, forum sql.NullString
			summary                                  int
			created                                  int64
		)
		if err := rows.Scan(&m.ID, &m.SessionID, &turn, &m.ThreadID, &m.Role, &parent, &m.Author, &m.Model,
			&m.Finish, &usage, &summary, &created, &meta, &origin, &forum); err != nil {
			return nil, dbErr(err)
		}
		m.TurnID, m.Origin, m.Metadata = turn.String, origin.String, fromRawText(meta)
		if err := decJSON(forum, &m.Forum); err != nil {
			return nil, err
		}
		m.ParentID = fromNullStr(parent)
		m.Summary = summary != 0
		m.CreatedAt = fromNano(created)
		if err := decJSON(usage, &m.Usage); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, dbErr(rows.Err())
}

// loadParts fills the parts of msgs with one query, however many messages.
func loadParts(x *tx, tenant string, msgs []*forge.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	byID := make(map[string]*forge.Message, len(msgs))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		byID[m.ID] = m
		ids[i] = m.ID
	}
	idJSON, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	rows, err := x.query(`SELECT id, message_id, type, text, state, call_id, tool,
		arguments, output, error, data, provider, created_at, updated_at
		FROM parts WHERE tenant = ? AND message_id IN (SELECT value FROM json_each(?))
		ORDER BY message_id, id`, tenant, string(idJSON))
	if err != nil {
		return dbErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			p                                  forge.Part
			args, output, perr, data, provider sql.NullString
			created, updated                   int64
		)
		if err := rows.Scan(&p.ID, &p.MessageID, &p.Type, &p.Text, &p.State, &p.CallID,
			&p.Tool, &args, &output, &perr, &data, &provider, &created, &updated); err != nil {
			return dbErr(err)
		}
		p.Arguments, p.Data, p.Provider = fromRawText(args), fromRawText(data), fromRawText(provider)
		p.Output, p.Error = fromNullStr(output), fromNullStr(perr)
		p.CreatedAt, p.UpdatedAt = fromNano(created), fromNano(updated)
		if m := byID[p.MessageID]; m != nil {
			p.SessionID, p.TurnID = m.SessionID, m.TurnID
			m.Parts = append(m.Parts, &p)
		}
	}
	return dbErr(rows.Err())
}

// branchSegments is the recursive CTE seg(lin, hi) of the branch ending at
// turn ?3 of session ?2 (tenant ?1): one row per lineage on it, with the
// depth the branch reaches in it (migration 0008), so a turn is on the
// branch when its lineage is a row's and its depth at most that row's. It
// takes one step per fork, however long the branch. UNION (not UNION ALL)
// stops on a cycle a corrupt chain could have.
const branchSegments = `seg(lin, hi) AS (
		SELECT lineage, depth FROM turns WHERE tenant = ?1 AND id = ?3 AND session_id = ?2
		UNION
		SELECT p.lineage, p.depth FROM seg s CROSS JOIN turns f CROSS JOIN turns p
		WHERE f.tenant = ?1 AND f.id = s.lin AND p.tenant = ?1 AND p.id = f.previous_turn_id AND p.session_id = ?2
	)`

// onBranch is the condition that the turn id in col is on the branch of
// branchSegments: one primary-key lookup of the turn.
func onBranch(col string) string {
	return `EXISTS (SELECT 1 FROM turns bt CROSS JOIN seg
		WHERE bt.tenant = ?1 AND bt.id = ` + col + ` AND bt.lineage = seg.lin AND bt.depth <= seg.hi)`
}

// ListMessages returns messages with their parts, oldest first, along the
// chain of turns ending at q.TipTurnID: a fork's sibling branches are not
// on the chain. The cursor is the last message id. A page reads the
// session's messages in id order from the cursor and keeps those of the
// branch's turns (each checked with one lookup, see branchSegments), so it
// costs what it returns plus the messages of other branches it skips,
// never the length of the chain before it.
func (s *Store) ListMessages(ctx context.Context, tenant string, q forge.MessageQuery) ([]*forge.Message, string, error) {
	limit := storeutil.Limit(q.Limit, storeutil.DefaultLimit)
	var out []*forge.Message
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, q.SessionID); err != nil {
			return err
		}
		if q.From != "" {
			var one int
			if err := x.queryRow(`SELECT 1 FROM messages WHERE tenant = ? AND id = ? AND session_id = ?`,
				tenant, q.From, q.SessionID).Scan(&one); err != nil {
				return notFound(err, "message %s not found", q.From)
			}
		}
		// Messages that belong to no turn (forum messages, copies in a
		// monologue) are on every branch. The planner would rather range
		// over the primary key (tenant, id), every session's messages:
		// messages_session keeps the scan to this session's.
		// One lower bound, the greater of the cursor's (exclusive: the
		// least id after it, ids hold no NUL) and From: given two, the
		// planner ranges over the first and filters on the other.
		lo := q.From
		if q.Cursor != "" && q.Cursor+"\x00" > lo {
			lo = q.Cursor + "\x00"
		}
		rows, err := x.query(`WITH RECURSIVE `+branchSegments+`
			SELECT `+msgCols+` FROM messages m INDEXED BY messages_session
			WHERE m.tenant = ?1 AND m.session_id = ?2 AND m.id >= ?4
				AND (m.turn_id IS NULL OR `+onBranch("m.turn_id")+`)
				AND (?5 = '' OR m.thread_id = ?5)
			ORDER BY m.id LIMIT ?6`,
			tenant, q.SessionID, q.TipTurnID, lo, q.ThreadID, limit+1)
		if err != nil {
			return dbErr(err)
		}
		if out, err = scanMessages(rows, tenant); err != nil {
			return err
		}
		if len(out) == 0 && q.TipTurnID != "" {
			var one int
			err := x.queryRow(`SELECT 1 FROM turns WHERE tenant = ? AND session_id = ? AND id = ?`,
				tenant, q.SessionID, q.TipTurnID).Scan(&one)
			return notFound(err, "turn %s not found", q.TipTurnID)
		}
		return loadParts(x, tenant, out[:min(limit, len(out))])
	})
	if err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(m *forge.Message) string { return m.ID })
	return out, next, nil
}

// TurnMessages returns the messages a turn wrote, with their parts.
func (s *Store) TurnMessages(ctx context.Context, tenant, turnID string) ([]*forge.Message, error) {
	var out []*forge.Message
	err := s.read(ctx, func(x *tx) error {
		rows, err := x.query(`SELECT `+msgCols+` FROM messages m WHERE m.tenant = ? AND m.turn_id = ? ORDER BY m.id`,
			tenant, turnID)
		if err != nil {
			return dbErr(err)
		}
		if out, err = scanMessages(rows, tenant); err != nil {
			return err
		}
		if len(out) == 0 {
			var one int
			err := x.queryRow(`SELECT 1 FROM turns WHERE tenant = ? AND id = ?`, tenant, turnID).Scan(&one)
			return notFound(err, "turn %s not found", turnID)
		}
		return loadParts(x, tenant, out)
	})
	return out, err
}

// LatestCompaction returns the newest compaction boundary along the branch:
// the session's summaries are read newest first (messages_summary) and the
// first on the branch whose parent carries a compaction part is it, so its
// cost is the summaries after it, never the length of the chain.
func (s *Store) LatestCompaction(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.CompactionBoundary, error) {
	var out *forge.CompactionBoundary
	err := s.read(ctx, func(x *tx) error {
		if err := liveSession(x, tenant, q.SessionID); err != nil {
			return err
		}
		if q.TipTurnID == "" {
			return nil
		}
		var (
			summary, request, data sql.NullString
			found                  bool
		)
		rows, err := x.query(`WITH RECURSIVE `+branchSegments+`
			SELECT s.id, s.parent_id, p.data FROM messages s
				JOIN parts p ON p.tenant = s.tenant AND p.message_id = s.parent_id AND p.type = 'compaction'
			WHERE s.tenant = ?1 AND s.session_id = ?2 AND s.summary = 1 AND s.finish NOT IN ('', 'error')
				AND (?4 = '' OR s.thread_id = ?4) AND `+onBranch("s.turn_id")+`
			ORDER BY s.id DESC LIMIT 1`,
			tenant, q.SessionID, q.TipTurnID, q.ThreadID)
		if err != nil {
			return dbErr(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(&summary, &request, &data); err != nil {
				return dbErr(err)
			}
			found = true
		}
		if err := rows.Err(); err != nil {
			return dbErr(err)
		}
		if !found {
			var one int
			err := x.queryRow(`SELECT 1 FROM turns WHERE tenant = ? AND session_id = ? AND id = ?`,
				tenant, q.SessionID, q.TipTurnID).Scan(&one)
			return notFound(err, "turn %s not found", q.TipTurnID)
		}
		var raw []byte
		if data.Valid {
			raw = []byte(data.String)
		}
		out, err = storeutil.Boundary(request.String, summary.String, raw)
		return err
	})
	return out, err
}

// TurnHistory reads the boundary, the first page and the snapshot one
// after the other: a read of the file costs no round trip.
func (s *Store) TurnHistory(ctx context.Context, tenant string, q forge.MessageQuery) (*forge.TurnHistory, error) {
	return storeutil.TurnHistory(ctx, s, tenant, q)
}
