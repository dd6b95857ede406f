package storetest

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/forge-runtime/forge"
)

// Retention (API.md, "Retention and listing"): expiring idle direct
// sessions by their agent's TTL or the default, losing every race to a
// turn, and purging deleted sessions in bounded transactions with the
// files only they referenced.

// retention returns the store's RetentionStore; the group runs only for
// stores that have one.
func (f *fixture) retention() forge.RetentionStore {
	f.Helper()
	r, ok := f.s.(forge.RetentionStore)
	if !ok {
		f.Skip("store has no RetentionStore")
	}
	return r
}

// agentWithTTL stores agent name of tenant with session TTL ttl (0: none).
func (f *fixture) agentWithTTL(tenant, name string, ttl time.Duration) {
	f.Helper()
	a := &forge.Agent{Tenant: tenant, Name: name, Model: "scripted/echo"}
	if ttl > 0 {
		a.Retention = &forge.Retention{SessionTTL: forge.TTL(ttl)}
	}
	f.ok(f.s.CreateAgent(f.ctx, a), "CreateAgent")
}

// idleSince is the session's last update as the store keeps it.
func (f *fixture) idleSince(ses *forge.Session) time.Time {
	f.Helper()
	got, err := f.s.GetSession(f.ctx, ses.Tenant, ses.ID)
	f.ok(err, "GetSession")
	return got.UpdatedAt
}

func (f *fixture) expiredSessions(q forge.ExpiryQuery) []string {
	f.Helper()
	if q.Limit == 0 {
		q.Limit = 100
	}
	refs, err := f.retention().ExpiredSessions(f.ctx, q)
	f.ok(err, "ExpiredSessions")
	out := []string{}
	for _, r := range refs {
		out = append(out, r.Tenant+"/"+r.ID)
		got, err := f.s.GetSession(f.ctx, r.Tenant, r.ID)
		f.ok(err, "GetSession of an expired session")
		eq(f, r.UpdatedAt.Equal(got.UpdatedAt), true, "ExpiredSessions' updated_at is the session's")
	}
	slices.Sort(out)
	return out
}

func refOf(s *forge.Session) string { return s.Tenant + "/" + s.ID }

func (f *fixture) sessionWithAgent(tenant, agent string) *forge.Session {
	f.Helper()
	now := f.now()
	s := &forge.Session{ID: f.id(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: agent,
		Title: "t", MainThreadID: f.id(forge.PrefixThread), CreatedAt: now, UpdatedAt: now}
	f.ok(f.s.CreateSession(f.ctx, s), "CreateSession")
	return s
}

// filePart is a completed file part of m naming file id.
func (f *fixture) filePart(m *forge.Message, id string) *forge.Part {
	p := f.textPart(m, "", forge.StateCompleted)
	p.Type = forge.PartFile
	p.Data, _ = json.Marshal(forge.FileData{FileID: id, Filename: "a.pdf", MimeType: "application/pdf", Bytes: 3})
	return p
}

// toolPart is a completed tool part of m whose result carries the files
// ids (an MCP tool's images: data.files).
func (f *fixture) toolPart(m *forge.Message, ids ...string) *forge.Part {
	p := f.textPart(m, "", forge.StateCompleted)
	p.Type, p.CallID, p.Tool = forge.PartTool, "call_"+p.ID, "shot"
	out := "[image]"
	p.Output = &out
	d := forge.ToolOutputData{}
	for _, id := range ids {
		d.Files = append(d.Files, forge.FileData{FileID: id, Filename: "i.png", MimeType: "image/png", Bytes: 3})
	}
	p.Data, _ = json.Marshal(d)
	return p
}

var retentionTests = []test{
	{name: "PurgeDeletesTheFilesOnlyItsToolResultsReferenced", run: func(f *fixture) {
		r, fs := f.retention(), f.files()
		ses, keep, other := f.newSession(tenantA), f.newSession(tenantA), f.newSession(tenantA)
		only := f.putFile(fs, tenantA, "only.pdf", []byte("only this tool result"))
		byTool := f.putFile(fs, tenantA, "tool.pdf", []byte("another tool result too"))
		byFile := f.putFile(fs, tenantA, "file.pdf", []byte("an attachment too"))
		commit := func(s *forge.Session, parts func(m *forge.Message) []*forge.Part) {
			st := f.start(s, nil, "turn")
			m := f.message(st.turn, s.MainThreadID, forge.RoleAssistant, "a")
			m.Parts = append(m.Parts, parts(m)...)
			f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: s.ID, TurnID: st.turn.ID,
				Messages: []*forge.Message{m}, Parts: m.Parts}), "Commit")
			f.end(s, st.turn)
		}
		commit(ses, func(m *forge.Message) []*forge.Part {
			return []*forge.Part{f.toolPart(m, only.ID, byTool.ID), f.toolPart(m, byFile.ID)}
		})
		commit(keep, func(m *forge.Message) []*forge.Part { return []*forge.Part{f.toolPart(m, byTool.ID)} })
		commit(other, func(m *forge.Message) []*forge.Part { return []*forge.Part{f.filePart(m, byFile.ID)} })
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		files := 0
		for range 100 {
			res, err := r.PurgeSession(f.ctx, tenantA, ses.ID, 1000)
			f.ok(err, "PurgeSession")
			files += res.Files
			if res.Done {
				break
			}
		}
		eq(f, files, 1, "files deleted with the session")
		_, err := fs.GetFile(f.ctx, tenantA, only.ID)
		f.is(err, forge.ErrNotFound, "the file only the purged session's tool result referenced")
		for _, kept := range []*forge.File{byTool, byFile} {
			if _, err := f.readFile(fs, tenantA, kept.ID); err != nil {
				f.Fatalf("the file %s another session still references: %v", kept.Filename, err)
			}
		}
	}},
	{name: "ExpiredSessionsFollowTheAgentsTTLOrTheDefault", run: func(f *fixture) {
		f.retention()
		f.agentWithTTL(tenantA, "short", time.Hour)
		f.agentWithTTL(tenantA, "plain", 0)
		f.agentWithTTL(tenantA, "long", 10*time.Hour)
		short := f.sessionWithAgent(tenantA, "short")
		long := f.sessionWithAgent(tenantA, "long")
		plain := f.sessionWithAgent(tenantA, "plain")
		// tenantB has no agent "short": its sessions get the default.
		other := f.sessionWithAgent(tenantB, "short")
		running := f.sessionWithAgent(tenantA, "short")
		f.start(running, nil, "still going")
		queued := f.sessionWithAgent(tenantA, "short")
		q := f.newTurn(queued, nil)
		q.Status, q.RequiredActions = forge.TurnQueued, []forge.RequiredAction{}
		f.ok(f.s.EnqueueTurn(f.ctx, q, []byte(`{}`)), "EnqueueTurn")
		scheduled := f.sessionWithAgent(tenantA, "short")
		sc := f.newSchedule(tenantA, base.Add(time.Hour))
		sc.SessionID = &scheduled.ID
		sc.ID = f.id(forge.PrefixSchedule)
		f.ok(f.schedules().CreateSchedule(f.ctx, sc), "CreateSchedule with a session")
		forum := &forge.Session{ID: f.id(forge.PrefixSession), Tenant: tenantA, Kind: forge.KindForum, Agent: "short",
			Title: "room", MainThreadID: f.id(forge.PrefixThread), CreatedAt: f.now(), UpdatedAt: f.now()}
		f.ok(f.s.CreateSession(f.ctx, forum), "CreateSession forum")

		// (The running and queued sessions are out for their turns, whenever
		// they were updated.)
		last := f.idleSince(short)
		for _, s := range []*forge.Session{plain, other, scheduled, forum, long} {
			if u := f.idleSince(s); u.After(last) {
				last = u
			}
		}
		eq(f, len(f.expiredSessions(forge.ExpiryQuery{Now: last.Add(59 * time.Minute)})), 0, "expired before the TTL")
		f.sameJSON(f.expiredSessions(forge.ExpiryQuery{Now: last.Add(61 * time.Minute)}), []string{refOf(short)},
			"expired after the agent's TTL, without a default")
		f.sameJSON(f.expiredSessions(forge.ExpiryQuery{Now: last.Add(3 * time.Hour), DefaultTTL: 2 * time.Hour}),
			sorted(refOf(short), refOf(plain), refOf(other)), "expired with a default of 2h (the agent's 10h wins)")
		f.sameJSON(f.expiredSessions(forge.ExpiryQuery{Now: last.Add(31 * time.Minute), OlderThan: 30 * time.Minute}),
			sorted(refOf(short), refOf(plain), refOf(other), refOf(long)), "expired by --older-than 30m, whatever the TTLs")
		eq(f, len(f.expiredSessions(forge.ExpiryQuery{Now: last.Add(3 * time.Hour), DefaultTTL: 2 * time.Hour, Limit: 1})), 1, "limit")
	}},
	{name: "ExpireSessionLosesToATurn", run: func(f *fixture) {
		r := f.retention()
		f.agentWithTTL(tenantA, "support", time.Hour)
		ses := f.sessionWithAgent(tenantA, "support")
		idle := f.idleSince(ses)
		// A turn began after the sweep read the session: it stays.
		f.is(r.ExpireSession(f.ctx, tenantA, ses.ID, idle), forge.ErrConflict, "ExpireSession of a session updated since")
		st := f.start(ses, nil, "hello")
		f.is(r.ExpireSession(f.ctx, tenantA, ses.ID, f.idleSince(ses).Add(time.Hour)), forge.ErrConflict,
			"ExpireSession during a turn")
		f.end(ses, st.turn)
		// Another tenant's id is not found, and nothing changes.
		f.is(r.ExpireSession(f.ctx, tenantB, ses.ID, f.idleSince(ses).Add(time.Hour)), forge.ErrNotFound, "another tenant's session")
		f.ok(r.ExpireSession(f.ctx, tenantA, ses.ID, f.idleSince(ses).Add(time.Hour)), "ExpireSession")
		_, err := f.s.GetSession(f.ctx, tenantA, ses.ID)
		f.is(err, forge.ErrNotFound, "GetSession of an expired session")
		f.is(r.ExpireSession(f.ctx, tenantA, ses.ID, time.Now().Add(time.Hour)), forge.ErrNotFound, "ExpireSession again")
		f.is(f.s.BeginTurn(f.ctx, &forge.BeginTurn{Turn: f.newTurn(ses, &st.turn.ID)}), forge.ErrNotFound,
			"BeginTurn in an expired session")
	}},
	{name: "PurgeDeletesASessionInBoundedStepsWithItsOwnFiles", run: func(f *fixture) {
		r, fs := f.retention(), f.files()
		ses := f.newSession(tenantA)
		keep := f.newSession(tenantA)
		only := f.putFile(fs, tenantA, "only.pdf", []byte("only this session"))
		shared := f.putFile(fs, tenantA, "shared.pdf", []byte("two sessions"))
		var prev *string
		for range 3 {
			st := f.start(ses, prev, "turn")
			m := f.message(st.turn, ses.MainThreadID, forge.RoleAssistant, "a", "b")
			m.Parts = append(m.Parts, f.filePart(m, only.ID), f.filePart(m, shared.ID))
			f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: st.turn.ID,
				Messages: []*forge.Message{m}, Parts: m.Parts}), "Commit messages")
			f.end(ses, st.turn)
			prev = &st.turn.ID
		}
		kst := f.start(keep, nil, "kept")
		km := f.message(kst.turn, keep.MainThreadID, forge.RoleAssistant, "kept")
		km.Parts = append(km.Parts, f.filePart(km, shared.ID))
		f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: keep.ID, TurnID: kst.turn.ID,
			Messages: []*forge.Message{km}, Parts: km.Parts}), "Commit kept")
		f.end(keep, kst.turn)
		keptBefore := f.events(keep, forge.EventQuery{})

		_, err := r.PurgeSession(f.ctx, tenantA, ses.ID, 10)
		f.is(err, forge.ErrInvalid, "PurgeSession of a live session")
		f.ok(f.s.DeleteSession(f.ctx, tenantA, ses.ID), "DeleteSession")
		refs, err := r.DeletedSessions(f.ctx, time.Now().Add(time.Hour), 10)
		f.ok(err, "DeletedSessions")
		f.sameJSON(refs, []forge.SessionRef{{Tenant: tenantA, ID: ses.ID}}, "deleted sessions")
		none, err := r.DeletedSessions(f.ctx, time.Unix(0, 0), 10)
		f.ok(err, "DeletedSessions before")
		eq(f, len(none), 0, "sessions deleted before 1970")

		// Another tenant's purge of the id finds nothing and touches nothing.
		res, err := r.PurgeSession(f.ctx, tenantB, ses.ID, 1000)
		f.ok(err, "PurgeSession from another tenant")
		eq(f, res.Rows, 0, "rows another tenant purged")

		const budget = 4
		calls, rows, files := 0, 0, 0
		for {
			res, err := r.PurgeSession(f.ctx, tenantA, ses.ID, budget)
			f.ok(err, "PurgeSession")
			calls++
			rows += res.Rows
			files += res.Files
			if res.Rows > budget+3 { // the turns go in one statement
				f.Fatalf("one PurgeSession deleted %d rows with a budget of %d", res.Rows, budget)
			}
			if res.Done {
				break
			}
			if calls > 100 {
				f.Fatal("PurgeSession never finished")
			}
		}
		if calls < 3 || rows < 20 {
			f.Fatalf("purged %d rows in %d calls: want the session's rows over several calls", rows, calls)
		}
		eq(f, files, 1, "files deleted with the session")
		_, err = fs.GetFile(f.ctx, tenantA, only.ID)
		f.is(err, forge.ErrNotFound, "the file only the purged session referenced")
		if got, err := f.readFile(fs, tenantA, shared.ID); err != nil || string(got) != "two sessions" {
			f.Fatalf("the file another session references: %q, %v", got, err)
		}
		refs, err = r.DeletedSessions(f.ctx, time.Now().Add(time.Hour), 10)
		f.ok(err, "DeletedSessions after")
		eq(f, len(refs), 0, "deleted sessions after the purge")
		again, err := r.PurgeSession(f.ctx, tenantA, ses.ID, budget)
		f.ok(err, "PurgeSession again")
		eq(f, again.Done, true, "a purged session is done")
		f.sameJSON(f.events(keep, forge.EventQuery{}), keptBefore, "the other session's events")
		msgs, _ := f.branch(keep, kst.turn.ID, keep.MainThreadID, 100, "")
		eq(f, len(msgs), 2, "the other session's messages")
		_, err = f.retention().ReclaimSpace(f.ctx, 100)
		f.ok(err, "ReclaimSpace")
	}},
}
