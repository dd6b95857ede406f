package storetest

import (
	"encoding/json"

	"github.com/forge-runtime/forge"
)

func init() {
	sessionTests = append(sessionTests,
		test{name: "ListFilters", run: testSessionListFilters},
		test{name: "ListNewestFirstPages", run: testSessionListPages},
	)
}

func (f *fixture) sessionOf(tenant, agent, kind, meta string) *forge.Session {
	f.Helper()
	now := f.now()
	s := &forge.Session{ID: f.id(forge.PrefixSession), Tenant: tenant, Kind: kind, Agent: agent,
		MainThreadID: f.id(forge.PrefixThread), Metadata: json.RawMessage(meta), CreatedAt: now, UpdatedAt: now}
	f.ok(f.s.CreateSession(f.ctx, s), "CreateSession")
	return s
}

func (f *fixture) listed(q forge.SessionQuery) []string {
	f.Helper()
	list, _, err := f.s.ListSessions(f.ctx, tenantA, q)
	f.ok(err, "ListSessions")
	return idsOf(list, func(s *forge.Session) string { return s.ID })
}

func testSessionListFilters(f *fixture) {
	a := f.sessionOf(tenantA, "support", forge.KindDirect, `{"team": "red", "tier": 2, "vip": true}`)
	b := f.sessionOf(tenantA, "billing", forge.KindDirect, `{"team": "blue", "tier": 2}`)
	c := f.sessionOf(tenantA, "support", forge.KindDirect, `{"team": "blue"}`)
	forum := f.newForum(tenantA)
	f.sessionOf(tenantB, "support", forge.KindDirect, `{"team": "red"}`)
	f.start(c, nil, "still running") // c moves to the newest update

	f.sameJSON(f.listed(forge.SessionQuery{}), []string{c.ID, forum.ID, b.ID, a.ID}, "all, newest update first")
	f.sameJSON(f.listed(forge.SessionQuery{Ascending: true}), []string{a.ID, b.ID, forum.ID, c.ID}, "all, oldest first")
	f.sameJSON(f.listed(forge.SessionQuery{Agent: "support"}), []string{c.ID, a.ID}, "agent")
	f.sameJSON(f.listed(forge.SessionQuery{Kind: forge.KindForum}), []string{forum.ID}, "kind")
	f.sameJSON(f.listed(forge.SessionQuery{Status: forge.SessionRunning}), []string{c.ID}, "running")
	f.sameJSON(f.listed(forge.SessionQuery{Status: forge.SessionIdle, Kind: forge.KindDirect}), []string{b.ID, a.ID}, "idle")
	f.sameJSON(f.listed(forge.SessionQuery{Metadata: map[string]string{"team": "blue"}}), []string{c.ID, b.ID}, "metadata string")
	f.sameJSON(f.listed(forge.SessionQuery{Metadata: map[string]string{"team": "blue", "tier": "2"}}), []string{b.ID}, "metadata string and number")
	f.sameJSON(f.listed(forge.SessionQuery{Metadata: map[string]string{"vip": "true"}}), []string{a.ID}, "metadata boolean")
	f.sameJSON(f.listed(forge.SessionQuery{Metadata: map[string]string{"team": "green"}}), []string{}, "metadata no match")
	f.sameJSON(f.listed(forge.SessionQuery{UpdatedAfter: b.UpdatedAt}), []string{c.ID, forum.ID}, "updated after")
	f.sameJSON(f.listed(forge.SessionQuery{UpdatedBefore: b.UpdatedAt}), []string{a.ID}, "updated before")

	for _, q := range []forge.SessionQuery{
		{Status: "busy"},
		{Metadata: map[string]string{`x"]') OR 1=1 --`: "y"}},
		{Metadata: map[string]string{"": "y"}},
		{ListOptions: forge.ListOptions{Cursor: "not-a-cursor"}},
	} {
		_, _, err := f.s.ListSessions(f.ctx, tenantA, q)
		f.is(err, forge.ErrInvalid, "a refused query")
	}
}

func testSessionListPages(f *fixture) {
	var want []string
	for range 5 {
		s := f.sessionOf(tenantA, "support", forge.KindDirect, `{}`)
		want = append([]string{s.ID}, want...)
	}
	got := pages(f, 2, func(o forge.ListOptions) ([]*forge.Session, string, error) {
		return f.s.ListSessions(f.ctx, tenantA, forge.SessionQuery{ListOptions: o})
	}, func(s *forge.Session) string { return s.ID })
	f.sameJSON(got, [][]string{want[:2], want[2:4], want[4:]}, "pages, newest first")
}
