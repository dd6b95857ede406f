package storetest

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/forge-runtime/forge"
)

// webhooks returns the store's WebhookStore; the Webhooks group runs only
// for stores that have one.
func (f *fixture) webhooks() forge.WebhookStore {
	f.Helper()
	ws, ok := f.s.(forge.WebhookStore)
	if !ok {
		f.Skip("store has no WebhookStore")
	}
	return ws
}

var webhookTests = []test{
	{name: "CreateGetListDelete", run: testWebhookCRUD},
	{name: "InvalidWebhooks", run: testWebhookInvalid},
	{name: "OutboxWithTheEvent", run: testWebhookOutbox},
	{name: "ForumMessages", run: testWebhookForumMessages},
	{name: "ClaimOnce", run: testWebhookClaimOnce},
	{name: "RetryAndGiveUp", run: testWebhookRetry},
	{name: "DeliveriesNewestFirst", run: testWebhookDeliveryPages},
}

func (f *fixture) newWebhook(ws forge.WebhookStore, tenant string, events ...string) *forge.Webhook {
	f.Helper()
	w := &forge.Webhook{Tenant: tenant, URL: "https://hooks.example.com/" + tenant, Events: events, Description: "ops"}
	f.ok(ws.CreateWebhook(f.ctx, w), "CreateWebhook")
	return w
}

func (f *fixture) claimDeliveries(ws forge.WebhookStore, owner string) []*forge.DueDelivery {
	f.Helper()
	due, err := ws.ClaimDeliveries(f.ctx, owner, time.Minute, 100)
	f.ok(err, "ClaimDeliveries")
	return due
}

func testWebhookCRUD(f *fixture) {
	ws := f.webhooks()
	w := f.newWebhook(ws, tenantA, forge.EventForumMessage, forge.EventTurnDone, forge.EventTurnDone)
	eq(f, strings.HasPrefix(w.ID, forge.PrefixWebhook), true, "id prefix")
	eq(f, strings.HasPrefix(w.Secret, "whsec_"), true, "secret prefix")
	f.sameJSON(w.Events, []string{forge.EventTurnDone, forge.EventForumMessage}, "events in API order, once each")
	got, err := ws.GetWebhook(f.ctx, tenantA, w.ID)
	f.ok(err, "GetWebhook")
	eq(f, got.URL, w.URL, "url")
	eq(f, got.Secret, w.Secret, "secret kept")
	eq(f, got.Description, "ops", "description")
	f.sameJSON(got.Events, w.Events, "events")
	eq(f, got.CreatedAt.Equal(w.CreatedAt), true, "created_at")

	_, err = ws.GetWebhook(f.ctx, tenantB, w.ID)
	f.is(err, forge.ErrNotFound, "another tenant's webhook")
	f.is(ws.DeleteWebhook(f.ctx, tenantB, w.ID), forge.ErrNotFound, "deleting another tenant's webhook")
	_, _, err = ws.ListDeliveries(f.ctx, tenantB, w.ID, forge.ListOptions{})
	f.is(err, forge.ErrNotFound, "another tenant's deliveries")
	list, _, err := ws.ListWebhooks(f.ctx, tenantB, forge.ListOptions{})
	f.ok(err, "ListWebhooks B")
	eq(f, len(list), 0, "another tenant's webhooks listed")

	w2 := f.newWebhook(ws, tenantA, forge.EventActionRequired)
	w3 := f.newWebhook(ws, tenantA, forge.EventActionRequired)
	f.sameJSON(f.webhookPages(ws, 2), [][]string{{w.ID, w2.ID}, {w3.ID}}, "pages of webhooks")

	f.ok(ws.DeleteWebhook(f.ctx, tenantA, w2.ID), "DeleteWebhook")
	_, err = ws.GetWebhook(f.ctx, tenantA, w2.ID)
	f.is(err, forge.ErrNotFound, "a deleted webhook")
	f.is(ws.DeleteWebhook(f.ctx, tenantA, w2.ID), forge.ErrNotFound, "deleting twice")
}

func (f *fixture) webhookPages(ws forge.WebhookStore, limit int) [][]string {
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.Webhook, string, error) {
		return ws.ListWebhooks(f.ctx, tenantA, o)
	}, func(w *forge.Webhook) string { return w.ID })
}

func testWebhookInvalid(f *fixture) {
	ws := f.webhooks()
	for _, w := range []*forge.Webhook{
		{Tenant: tenantA, URL: "https://x.example", Events: nil},
		{Tenant: tenantA, URL: "https://x.example", Events: []string{"turn.created"}},
		{Tenant: tenantA, URL: "", Events: []string{forge.EventTurnDone}},
	} {
		f.is(ws.CreateWebhook(f.ctx, w), forge.ErrInvalid, "CreateWebhook "+strings.Join(w.Events, ","))
	}
	list, _, err := ws.ListWebhooks(f.ctx, tenantA, forge.ListOptions{})
	f.ok(err, "ListWebhooks")
	eq(f, len(list), 0, "webhooks stored by refused creates")
}

// testWebhookOutbox: a committed turn.done gives one pending delivery per
// subscribed endpoint of its tenant, with the event as stored; a write
// that fails gives none.
func testWebhookOutbox(f *fixture) {
	ws := f.webhooks()
	done := f.newWebhook(ws, tenantA, forge.EventTurnDone)
	f.newWebhook(ws, tenantA, forge.EventActionRequired)
	f.newWebhook(ws, tenantB, forge.EventTurnDone)
	ses := f.newSession(tenantA)
	st := f.start(ses, nil, "hi")
	eq(f, len(f.claimDeliveries(ws, "r1")), 0, "deliveries of events nobody subscribes to")
	ev := f.end(ses, st.turn)
	// The turn ended: a second terminal write is refused and queues nothing.
	again := f.event(st.turn, f.seqs(ses, 1)[0], forge.EventTurnDone, st.turn.ID, st.turn)
	err := f.s.Commit(f.ctx, &forge.Batch{Tenant: tenantA, SessionID: ses.ID, TurnID: st.turn.ID, Events: []forge.Event{again}})
	f.is(err, forge.ErrTurnEnded, "Commit after the end")

	due := f.claimDeliveries(ws, "r1")
	eq(f, len(due), 1, "deliveries")
	d := due[0]
	eq(f, d.WebhookID, done.ID, "endpoint")
	eq(f, d.URL, done.URL, "url")
	eq(f, d.Secret, done.Secret, "secret")
	eq(f, d.EventType, forge.EventTurnDone, "event type")
	eq(f, d.SessionID, ses.ID, "session")
	eq(f, d.Seq, ev.Seq, "seq")
	eq(f, d.Status, forge.DeliveryPending, "status")
	eq(f, strings.HasPrefix(d.ID, "evt_"), true, "message id")
	var payload forge.Event
	f.ok(json.Unmarshal(d.Payload, &payload), "payload")
	eq(f, payload.Type, forge.EventTurnDone, "payload type")
	eq(f, payload.Seq, ev.Seq, "payload seq")
	eq(f, payload.SessionID, ses.ID, "payload session")
	var turn forge.Turn
	f.ok(json.Unmarshal(payload.Data, &turn), "payload data")
	eq(f, turn.Status, forge.TurnDone, "payload turn")
}

func testWebhookForumMessages(f *fixture) {
	ws := f.webhooks()
	w := f.newWebhook(ws, tenantA, forge.EventForumMessage)
	forum := f.newForum(tenantA)
	info := &forge.ForumInfo{Kind: forge.ForumKindMessage, ParticipantID: "par_1", ActorID: "human:alice"}
	m := f.forumMessage(forum, "hello", info, "")
	ev := f.forumEvent(forum, forge.EventForumMessage, m.ID, m)
	f.ok(f.s.AppendLoose(f.ctx, &forge.LooseAppend{Tenant: tenantA, SessionID: forum.ID, Messages: []*forge.Message{m},
		Events: []forge.Event{ev}}), "AppendLoose")
	due := f.claimDeliveries(ws, "r1")
	eq(f, len(due), 1, "deliveries")
	eq(f, due[0].WebhookID, w.ID, "endpoint")
	eq(f, due[0].Seq, ev.Seq, "seq")
	eq(f, due[0].EventType, forge.EventForumMessage, "type")
}

func testWebhookClaimOnce(f *fixture) {
	ws := f.webhooks()
	f.newWebhook(ws, tenantA, forge.EventTurnDone)
	f.newWebhook(ws, tenantB, forge.EventTurnDone)
	for _, tenant := range []string{tenantA, tenantB} {
		ses := f.newSession(tenant)
		f.end(ses, f.start(ses, nil, "hi").turn)
	}
	first := f.claimDeliveries(ws, "r1")
	eq(f, len(first), 2, "deliveries of both tenants")
	eq(f, len(f.claimDeliveries(ws, "r2")), 0, "deliveries claimed twice")
	// Only the claimer records; then nothing is due.
	d := &first[0].WebhookDelivery
	f.is(ws.RecordDelivery(f.ctx, d, "r2", forge.DeliveryResult{Delivered: true, ResponseCode: 200}), forge.ErrNotFound,
		"a record by another claimer")
	f.ok(ws.RecordDelivery(f.ctx, d, "r1", forge.DeliveryResult{Delivered: true, ResponseCode: 204}), "RecordDelivery")
	f.is(ws.RecordDelivery(f.ctx, d, "r1", forge.DeliveryResult{Delivered: true, ResponseCode: 204}), forge.ErrNotFound,
		"a second record")
	list, _, err := ws.ListDeliveries(f.ctx, d.Tenant, d.WebhookID, forge.ListOptions{})
	f.ok(err, "ListDeliveries")
	eq(f, len(list), 1, "deliveries listed")
	eq(f, list[0].Status, forge.DeliveryDelivered, "status")
	eq(f, list[0].Attempts, 1, "attempts")
	eq(f, list[0].ResponseCode, 204, "response code")
	eq(f, list[0].NextAttemptAt == nil, true, "no next attempt")
	eq(f, list[0].LastAttemptAt != nil, true, "last attempt")
}

func testWebhookRetry(f *fixture) {
	ws := f.webhooks()
	w := f.newWebhook(ws, tenantA, forge.EventTurnDone)
	ses := f.newSession(tenantA)
	f.end(ses, f.start(ses, nil, "hi").turn)
	d := f.claimDeliveries(ws, "r1")[0]
	// A retry due at once: claimed again, by anyone.
	f.ok(ws.RecordDelivery(f.ctx, &d.WebhookDelivery, "r1", forge.DeliveryResult{ResponseCode: 503, Error: "503 Service Unavailable",
		RetryIn: time.Millisecond}), "RecordDelivery 503")
	list, _, err := ws.ListDeliveries(f.ctx, tenantA, w.ID, forge.ListOptions{})
	f.ok(err, "ListDeliveries")
	eq(f, list[0].Status, forge.DeliveryPending, "status after a failure")
	eq(f, list[0].Attempts, 1, "attempts")
	eq(f, list[0].ResponseCode, 503, "response code")
	eq(f, list[0].Error, "503 Service Unavailable", "error")
	eq(f, list[0].NextAttemptAt != nil, true, "next attempt")
	var again []*forge.DueDelivery
	for range 200 {
		if again = f.claimDeliveries(ws, "r2"); len(again) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	eq(f, len(again), 1, "the retry claimed")
	eq(f, again[0].ID, d.ID, "the same message id")
	// A retry past the 24 h limit ends it failed.
	f.ok(ws.RecordDelivery(f.ctx, &again[0].WebhookDelivery, "r2", forge.DeliveryResult{Error: "connection refused",
		RetryIn: 25 * time.Hour}), "RecordDelivery refused")
	list, _, err = ws.ListDeliveries(f.ctx, tenantA, w.ID, forge.ListOptions{})
	f.ok(err, "ListDeliveries")
	eq(f, list[0].Status, forge.DeliveryFailed, "status once retries ran out")
	eq(f, list[0].Attempts, 2, "attempts")
	eq(f, list[0].NextAttemptAt == nil, true, "no next attempt")
	eq(f, len(f.claimDeliveries(ws, "r3")), 0, "a failed delivery claimed")
}

func testWebhookDeliveryPages(f *fixture) {
	ws := f.webhooks()
	w := f.newWebhook(ws, tenantA, forge.EventTurnDone)
	ses := f.newSession(tenantA)
	var prev *string
	var seqs []int64
	for range 3 {
		st := f.start(ses, prev, "hi")
		seqs = append(seqs, f.end(ses, st.turn).Seq)
		prev = &st.turn.ID
	}
	got := pages(f, 2, func(o forge.ListOptions) ([]*forge.WebhookDelivery, string, error) {
		return ws.ListDeliveries(f.ctx, tenantA, w.ID, o)
	}, func(d *forge.WebhookDelivery) string { return d.ID })
	want := func(seq int64) string { return "evt_" + ses.ID + "_" + strconv.FormatInt(seq, 10) }
	f.sameJSON(got, [][]string{{want(seqs[2]), want(seqs[1])}, {want(seqs[0])}}, "pages of deliveries, newest first")
	f.ok(ws.DeleteWebhook(f.ctx, tenantA, w.ID), "DeleteWebhook")
	eq(f, len(f.claimDeliveries(ws, "r1")), 0, "deliveries of a deleted webhook")
}
