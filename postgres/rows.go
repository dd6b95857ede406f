package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// scope is the tenant, session and turn every row of one write belongs to;
// rows are stamped with it whatever their own fields say.
type scope struct {
	tenant, session, turn string
}

// Rows of one kind go to the database as one array per column and are
// inserted by one INSERT ... SELECT FROM unnest(...): one statement, one
// prepared plan, whatever the number of rows.

type messageRows struct {
	id, thread, role, author, model, finish []string
	parent, usage, meta, origin, forum      []*string
	summary                                 []bool
	created                                 []time.Time
}

func (r *messageRows) len() int { return len(r.id) }

type partRows struct {
	id, message, typ, state, call, tool []string
	text, output, errs                  [][]byte
	args, data, provider                []*string
	created, updated                    []time.Time
}

func (r *partRows) len() int { return len(r.id) }

// encodeMessages encodes message envelopes, and their parts into parts
// when parts is not nil.
func (s *Store) encodeMessages(msgs []*forge.Message, parts *partRows) (*messageRows, error) {
	now := s.now()
	out := &messageRows{}
	for _, m := range msgs {
		if err := storeutil.CheckMessage(m); err != nil {
			return nil, err
		}
		usage, err := encJSON(m.Usage)
		if err != nil {
			return nil, err
		}
		out.id = append(out.id, m.ID)
		out.thread = append(out.thread, m.ThreadID)
		out.role = append(out.role, m.Role)
		out.parent = append(out.parent, m.ParentID)
		out.author = append(out.author, m.Author)
		out.model = append(out.model, m.Model)
		out.finish = append(out.finish, m.Finish)
		out.usage = append(out.usage, usage)
		out.summary = append(out.summary, m.Summary)
		out.created = append(out.created, storeutil.Or(m.CreatedAt, now))
		forum, err := encJSON(m.Forum)
		if err != nil {
			return nil, err
		}
		out.meta = append(out.meta, rawText(m.Metadata))
		out.origin = append(out.origin, nullStr(m.Origin))
		out.forum = append(out.forum, forum)
		if parts != nil {
			if err := s.encodeParts(parts, m.ID, m.Parts); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// encodeParts appends parts to out; messageID, when set, overrides each
// part's.
func (s *Store) encodeParts(out *partRows, messageID string, parts []*forge.Part) error {
	now := s.now()
	for _, p := range parts {
		mid, err := storeutil.PartMessage(p, messageID)
		if err != nil {
			return err
		}
		out.id = append(out.id, p.ID)
		out.message = append(out.message, mid)
		out.typ = append(out.typ, p.Type)
		out.text = append(out.text, textBytes(p.Text))
		out.state = append(out.state, p.State)
		out.call = append(out.call, p.CallID)
		out.tool = append(out.tool, p.Tool)
		out.args = append(out.args, rawText(p.Arguments))
		out.output = append(out.output, optBytes(p.Output))
		out.errs = append(out.errs, optBytes(p.Error))
		out.data = append(out.data, rawText(p.Data))
		out.provider = append(out.provider, rawText(p.Provider))
		out.created = append(out.created, storeutil.Or(p.CreatedAt, now))
		out.updated = append(out.updated, storeutil.Or(p.UpdatedAt, now))
	}
	return nil
}

// lastByID keeps the last of the rows sharing an id (in their first
// row's place): an upsert may not touch a row twice in one statement, and
// one after the other the last would win.
func lastByID(ids []string) (keep []int, dup bool) {
	last := make(map[string]int, len(ids))
	for i, id := range ids {
		if _, ok := last[id]; ok {
			dup = true
		}
		last[id] = i
	}
	if !dup {
		return nil, false
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			keep = append(keep, last[id])
		}
	}
	return keep, true
}

func pick[T any](s []T, idx []int) []T {
	out := make([]T, len(idx))
	for i, j := range idx {
		out[i] = s[j]
	}
	return out
}

func (r *messageRows) dedup() {
	idx, dup := lastByID(r.id)
	if !dup {
		return
	}
	*r = messageRows{id: pick(r.id, idx), thread: pick(r.thread, idx), role: pick(r.role, idx),
		author: pick(r.author, idx), model: pick(r.model, idx), finish: pick(r.finish, idx),
		parent: pick(r.parent, idx), usage: pick(r.usage, idx), summary: pick(r.summary, idx),
		created: pick(r.created, idx)}
}

func (r *partRows) dedup() {
	idx, dup := lastByID(r.id)
	if !dup {
		return
	}
	*r = partRows{id: pick(r.id, idx), message: pick(r.message, idx), typ: pick(r.typ, idx),
		state: pick(r.state, idx), call: pick(r.call, idx), tool: pick(r.tool, idx), text: pick(r.text, idx),
		output: pick(r.output, idx), errs: pick(r.errs, idx), args: pick(r.args, idx), data: pick(r.data, idx),
		provider: pick(r.provider, idx), created: pick(r.created, idx), updated: pick(r.updated, idx)}
}

const insertMessagesSQL = `INSERT INTO messages (tenant, id, session_id, turn_id, thread_id, role, parent_id, author,
		model, finish, usage, summary, created_at, metadata, origin, forum)
	SELECT $1, u.id, $2, NULLIF($3, ''), u.thread_id, u.role, u.parent_id, u.author, u.model, u.finish, u.usage,
		u.summary, u.created_at, u.metadata, u.origin, u.forum
	FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
		$12::boolean[], $13::timestamptz[], $14::text[], $15::text[], $16::text[])
		AS u(id, thread_id, role, parent_id, author, model, finish, usage, summary, created_at, metadata, origin, forum)`

// A message's finish, usage and model are set when its model call ends.
const upsertMessagesSQL = insertMessagesSQL + `
	ON CONFLICT (tenant, id) DO UPDATE SET parent_id = excluded.parent_id, author = excluded.author,
		model = excluded.model, finish = excluded.finish, usage = excluded.usage, summary = excluded.summary`

func queueMessages(b *pgx.Batch, sql string, sc scope, r *messageRows) {
	if r.len() == 0 {
		return
	}
	b.Queue(sql, sc.tenant, sc.session, sc.turn, r.id, r.thread, r.role, r.parent, r.author, r.model, r.finish,
		r.usage, r.summary, r.created, r.meta, r.origin, r.forum)
}

const insertPartsSQL = `INSERT INTO parts (tenant, id, message_id, session_id, turn_id, type, text, state, call_id,
		tool, arguments, output, error, data, provider, created_at, updated_at)
	SELECT $1, u.id, u.message_id, $2, $3, u.type, u.text, u.state, u.call_id, u.tool, u.arguments, u.output,
		u.error, u.data, u.provider, u.created_at, u.updated_at
	FROM unnest($4::text[], $5::text[], $6::text[], $7::bytea[], $8::text[], $9::text[], $10::text[], $11::text[],
		$12::bytea[], $13::bytea[], $14::text[], $15::text[], $16::timestamptz[], $17::timestamptz[])
		AS u(id, message_id, type, text, state, call_id, tool, arguments, output, error, data, provider,
			created_at, updated_at)`

// A streaming part is written empty, checkpointed, then rewritten whole at
// its end.
const upsertPartsSQL = insertPartsSQL + `
	ON CONFLICT (tenant, id) DO UPDATE SET type = excluded.type, text = excluded.text, state = excluded.state,
		call_id = excluded.call_id, tool = excluded.tool, arguments = excluded.arguments, output = excluded.output,
		error = excluded.error, data = excluded.data, provider = excluded.provider, updated_at = excluded.updated_at`

func queueParts(b *pgx.Batch, sql string, sc scope, r *partRows) {
	if r.len() == 0 {
		return
	}
	b.Queue(sql, sc.tenant, sc.session, sc.turn, r.id, r.message, r.typ, r.text, r.state, r.call, r.tool, r.args,
		r.output, r.errs, r.data, r.provider, r.created, r.updated)
}
