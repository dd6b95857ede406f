package storetest

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

func sampleAgent(tenant, name string) *forge.Agent {
	return &forge.Agent{
		Tenant: tenant, Name: name, Model: "openai/gpt-4.1-mini",
		ModelParams: forge.ModelParams{MaxTokens: ptr(int64(2048)), Temperature: ptr(0.2), ReasoningEffort: "low",
			Script: json.RawMessage(`{"steps": [{"text": "hi"}]}`)},
		Instructions: "You are a support agent.",
		Tools: []forge.ToolSpec{
			{Name: "read_file", BuiltIn: true},
			{Name: "ask_user", Description: "Ask the user", InputSchema: json.RawMessage(`{"type": "object"}`), Client: true},
		},
		Approval: map[string]string{"refund": forge.PolicyAsk, "*": forge.PolicyAllow},
		MCPServers: []forge.MCPServer{
			{Name: "everything", Command: []string{"npx", "-y", "server-everything"}, Env: map[string]string{"TOKEN": "s3cret"}},
			{Name: "crm", URL: "https://crm.example/mcp", Headers: map[string]string{"Authorization": "Bearer s3cret"}},
		},
		Subagents:      []string{"researcher"},
		IterationLimit: 50,
		Compaction:     forge.Compaction{Enabled: ptr(true), ContextWindow: ptr(int64(64000)), Threshold: ptr(0.7)},
	}
}

// agentBody is an agent without the fields the store sets, for comparing
// definitions.
func agentBody(a *forge.Agent) *forge.Agent {
	c := *a
	c.ID, c.Version, c.CreatedAt, c.UpdatedAt = "", 0, time.Time{}, time.Time{}
	return &c
}

// nearTime allows for a store that keeps times at microsecond precision.
func nearTime(f *fixture, got, want time.Time, what string) {
	f.Helper()
	if d := got.Sub(want); d < -time.Millisecond || d > time.Millisecond {
		f.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func (f *fixture) createAgent(tenant, name string) *forge.Agent {
	f.Helper()
	a := sampleAgent(tenant, name)
	f.ok(f.s.CreateAgent(f.ctx, a), "CreateAgent "+name)
	return a
}

func (f *fixture) agentNames(tenant string, limit int) [][]string {
	f.Helper()
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.Agent, string, error) {
		return f.s.ListAgents(f.ctx, tenant, o)
	}, func(a *forge.Agent) string { return a.Name })
}

var agentTests = []test{
	{name: "CreateSetsIdentityAndRoundTrips", run: func(f *fixture) {
		a := f.createAgent(tenantA, "support")
		if !strings.HasPrefix(a.ID, forge.PrefixAgent) {
			f.Fatalf("ID = %q, want prefix %s", a.ID, forge.PrefixAgent)
		}
		eq(f, a.Version, 1, "Version")
		if a.CreatedAt.IsZero() || a.UpdatedAt.IsZero() {
			f.Fatal("CreateAgent left timestamps zero")
		}
		got, err := f.s.GetAgent(f.ctx, tenantA, "support")
		f.ok(err, "GetAgent")
		eq(f, got.ID, a.ID, "ID")
		eq(f, got.Version, 1, "Version")
		eq(f, got.Tenant, tenantA, "Tenant")
		nearTime(f, got.CreatedAt, a.CreatedAt, "CreatedAt")
		// Secrets are stored as given: redaction is the API's job.
		f.sameJSON(agentBody(got), agentBody(a), "agent")
	}},
	{name: "DuplicateNameConflicts", run: func(f *fixture) {
		f.createAgent(tenantA, "support")
		f.is(f.s.CreateAgent(f.ctx, sampleAgent(tenantA, "support")), forge.ErrConflict, "second CreateAgent")
		// Names are per tenant.
		f.createAgent(tenantB, "support")
	}},
	{name: "UpdateMakesNewVersion", run: func(f *fixture) {
		v1 := f.createAgent(tenantA, "support")
		v2 := sampleAgent(tenantA, "support")
		v2.Instructions = "Be brief."
		v2.Model = "anthropic/claude-sonnet-4"
		f.ok(f.s.UpdateAgent(f.ctx, v2), "UpdateAgent")
		eq(f, v2.ID, v1.ID, "ID after update")
		eq(f, v2.Version, 2, "Version after update")
		nearTime(f, v2.CreatedAt, v1.CreatedAt, "CreatedAt after update")

		cur, err := f.s.GetAgent(f.ctx, tenantA, "support")
		f.ok(err, "GetAgent")
		eq(f, cur.Version, 2, "current Version")
		f.sameJSON(agentBody(cur), agentBody(v2), "current agent")

		old, err := f.s.GetAgentVersion(f.ctx, tenantA, v1.ID, 1)
		f.ok(err, "GetAgentVersion 1")
		eq(f, old.Version, 1, "old Version")
		eq(f, old.Instructions, "You are a support agent.", "old Instructions")
		f.sameJSON(agentBody(old), agentBody(v1), "version 1")

		again, err := f.s.GetAgentVersion(f.ctx, tenantA, v1.ID, 2)
		f.ok(err, "GetAgentVersion 2")
		eq(f, again.Instructions, "Be brief.", "v2 Instructions")
		_, err = f.s.GetAgentVersion(f.ctx, tenantA, v1.ID, 3)
		f.is(err, forge.ErrNotFound, "GetAgentVersion 3")
	}},
	{name: "UpdateUnknownIsNotFound", run: func(f *fixture) {
		f.is(f.s.UpdateAgent(f.ctx, sampleAgent(tenantA, "ghost")), forge.ErrNotFound, "UpdateAgent")
	}},
	{name: "DeleteHidesButKeepsVersions", run: func(f *fixture) {
		a := f.createAgent(tenantA, "support")
		f.createAgent(tenantA, "other")
		f.ok(f.s.DeleteAgent(f.ctx, tenantA, "support"), "DeleteAgent")
		_, err := f.s.GetAgent(f.ctx, tenantA, "support")
		f.is(err, forge.ErrNotFound, "GetAgent after delete")
		f.sameJSON(f.agentNames(tenantA, 10), [][]string{{"other"}}, "ListAgents after delete")
		v, err := f.s.GetAgentVersion(f.ctx, tenantA, a.ID, 1)
		f.ok(err, "GetAgentVersion of a deleted agent")
		eq(f, v.Name, "support", "Name")
		f.is(f.s.DeleteAgent(f.ctx, tenantA, "support"), forge.ErrNotFound, "second DeleteAgent")
		f.is(f.s.DeleteAgent(f.ctx, tenantA, "ghost"), forge.ErrNotFound, "DeleteAgent unknown")
		f.is(f.s.UpdateAgent(f.ctx, sampleAgent(tenantA, "support")), forge.ErrNotFound, "UpdateAgent deleted")
	}},
	{name: "RecreateAfterDelete", run: func(f *fixture) {
		old := f.createAgent(tenantA, "support")
		f.ok(f.s.UpdateAgent(f.ctx, sampleAgent(tenantA, "support")), "UpdateAgent")
		f.ok(f.s.DeleteAgent(f.ctx, tenantA, "support"), "DeleteAgent")
		fresh := sampleAgent(tenantA, "support")
		fresh.Instructions = "Second life."
		f.ok(f.s.CreateAgent(f.ctx, fresh), "CreateAgent after delete")
		if fresh.ID == old.ID {
			f.Fatal("re-created agent reuses the deleted agent's id")
		}
		eq(f, fresh.Version, 1, "Version of the re-created agent")
		cur, err := f.s.GetAgent(f.ctx, tenantA, "support")
		f.ok(err, "GetAgent")
		eq(f, cur.ID, fresh.ID, "current ID")
		eq(f, cur.Instructions, "Second life.", "current Instructions")
		_, err = f.s.GetAgentVersion(f.ctx, tenantA, old.ID, 2)
		f.ok(err, "old agent's version 2")
		all, _, err := f.s.ListAgents(f.ctx, tenantA, forge.ListOptions{})
		f.ok(err, "ListAgents")
		f.sameJSON(idsOf(all, func(a *forge.Agent) string { return a.ID }), []string{fresh.ID}, "listed ids")
	}},
	{name: "ListPaginatesByName", run: func(f *fixture) {
		for _, n := range []string{"c", "a", "e", "b", "d"} {
			f.createAgent(tenantA, n)
		}
		f.sameJSON(f.agentNames(tenantA, 2), [][]string{{"a", "b"}, {"c", "d"}, {"e"}}, "pages of 2")
		f.sameJSON(f.agentNames(tenantA, 5), [][]string{{"a", "b", "c", "d", "e"}}, "one full page")
		f.sameJSON(f.agentNames(tenantA, 0), [][]string{{"a", "b", "c", "d", "e"}}, "default limit")
		f.ok(f.s.DeleteAgent(f.ctx, tenantA, "e"), "DeleteAgent")
		// An exact multiple of the limit ends without an empty extra page.
		f.sameJSON(f.agentNames(tenantA, 2), [][]string{{"a", "b"}, {"c", "d"}}, "pages of 2 after delete")
		f.sameJSON(f.agentNames(tenantB, 2), [][]string{{}}, "other tenant")
	}},
}
