package storetest

import (
	"strings"

	"github.com/forge-runtime/forge"
)

// Text that a model, a tool or a client can produce and a store must keep
// byte for byte: a NUL, bytes that are not UTF-8, and a large value.
var hostileTexts = []string{
	"nul \x00 inside",
	"not utf-8: \xff\xfe \xc3\x28",
	strings.Repeat("large ", 200_000),
}

var contentTests = []test{
	{name: "FreeTextKeepsEveryByte", run: func(f *fixture) {
		for i, text := range hostileTexts {
			ses := f.newSession(tenantA)
			ses.Title = text
			ses.ID = f.id(forge.PrefixSession)
			f.ok(f.s.CreateSession(f.ctx, ses), "CreateSession")
			got, err := f.s.GetSession(f.ctx, tenantA, ses.ID)
			f.ok(err, "GetSession")
			eq(f, got.Title == text, true, "session title round trip")

			st := f.start(ses, nil, "hi")
			t := st.turn
			reply := f.message(t, ses.MainThreadID, forge.RoleAssistant, text)
			tool := f.textPart(reply, "", forge.StateError)
			tool.Type, tool.CallID, tool.Tool = forge.PartTool, "call_1", "read_file"
			tool.Output, tool.Error = ptr(text), ptr(text)
			reply.Parts = append(reply.Parts, tool)
			f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID,
				Messages: []*forge.Message{reply}, Parts: reply.Parts}), "Commit")
			ms, err := f.s.TurnMessages(f.ctx, tenantA, t.ID)
			f.ok(err, "TurnMessages")
			ps := ms[1].Parts
			eq(f, len(ps), 2, "parts")
			if ps[0].Text != text || *ps[1].Output != text || *ps[1].Error != text {
				f.Fatalf("text %d: a part's text, output or error changed in the store", i)
			}

			c := *t
			c.Status, c.CancelReason, c.CancelMessage = forge.TurnCancelled, ptr(forge.CancelClient), ptr(text)
			f.ok(f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: t.ID, Turn: &c}), "terminal Commit")
			if got := f.getTurn(t); got.CancelMessage == nil || *got.CancelMessage != text {
				f.Fatalf("text %d: the cancel message changed in the store", i)
			}
		}
	}},
}
