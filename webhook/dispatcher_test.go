package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/sqlite"
	"github.com/forge-runtime/forge/webhook"
)

type received struct {
	id, ts, sig string
	body        []byte
}

// receiver is a loopback endpoint answering with codes in turn (the last
// repeated) and keeping every request.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex // guards the following
	codes []int
	got   []received
}

func newReceiver(t *testing.T, codes ...int) *receiver {
	r := &receiver{codes: codes}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"),
			req.Header.Get("webhook-signature"), body})
		code := r.codes[min(len(r.got)-1, len(r.codes)-1)]
		r.mu.Unlock()
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		io.WriteString(w, "answer "+strconv.Itoa(code))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "forge.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// endTurn writes a turn of a new session of tenant and its turn.done.
func endTurn(t testing.TB, s *sqlite.Store, tenant string) *forge.Turn {
	t.Helper()
	ctx := context.Background()
	ids := forge.NewULIDGen(forge.SystemClock{})
	now := time.Now().UTC()
	ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindDirect, Agent: "support",
		MainThreadID: ids.New(forge.PrefixThread), CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, ses); err != nil {
		t.Fatal(err)
	}
	turn := &forge.Turn{ID: ids.New(forge.PrefixTurn), Tenant: tenant, SessionID: ses.ID, AgentID: "ag_1", AgentVersion: 1,
		Status: forge.TurnRunning, Input: []forge.Input{{Type: forge.InputMessage, Text: "hi"}}, CreatedAt: now}
	seq, err := s.ReserveSeqs(ctx, tenant, ses.ID, 2)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq int64, typ string) forge.Event {
		data, _ := json.Marshal(turn)
		return forge.Event{Seq: seq, ID: turn.ID, Type: typ, SessionID: ses.ID, TurnID: &turn.ID, Data: data}
	}
	if err := s.BeginTurn(ctx, &forge.BeginTurn{Turn: turn, Events: []forge.Event{ev(seq-1, forge.EventTurnCreated)}}); err != nil {
		t.Fatal(err)
	}
	turn.Status, turn.EndedAt = forge.TurnDone, &now
	if err := s.Commit(ctx, &forge.Batch{Tenant: tenant, SessionID: ses.ID, TurnID: turn.ID, Turn: turn,
		Events: []forge.Event{ev(seq, forge.EventTurnDone)}}); err != nil {
		t.Fatal(err)
	}
	return turn
}

func newWebhook(t testing.TB, s *sqlite.Store, tenant, url string) *forge.Webhook {
	t.Helper()
	w := &forge.Webhook{Tenant: tenant, URL: url, Events: []string{forge.EventTurnDone}}
	if err := s.CreateWebhook(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	return w
}

func start(t *testing.T, s *sqlite.Store, cfg webhook.Config) *webhook.Dispatcher {
	t.Helper()
	cfg.Owner = "replica-1"
	if cfg.Poll == 0 {
		cfg.Poll = 10 * time.Millisecond
	}
	if cfg.Backoff == nil {
		cfg.Backoff = []time.Duration{20 * time.Millisecond}
	}
	d := webhook.New(s, cfg)
	d.Start()
	t.Cleanup(func() {
		if err := d.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return d
}

// deliveries waits until the webhook's newest delivery has a status
// other than pending, or the deadline.
func settled(t *testing.T, s *sqlite.Store, tenant, id string) *forge.WebhookDelivery {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		list, _, err := s.ListDeliveries(context.Background(), tenant, id, forge.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 && list[0].Status != forge.DeliveryPending {
			return list[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery still pending: %+v", list)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFailedDeliveryIsRetriedWithTheSameIDAndAValidSignature(t *testing.T) {
	s := openStore(t)
	rcv := newReceiver(t, 503, 500, 204)
	w := newWebhook(t, s, "acme", rcv.URL+"/hook")
	turn := endTurn(t, s, "acme")
	start(t, s, webhook.Config{AllowPrivate: true})
	d := settled(t, s, "acme", w.ID)
	if d.Status != forge.DeliveryDelivered || d.Attempts != 3 || d.ResponseCode != 204 {
		t.Fatalf("delivery = %+v, want delivered after 3 attempts", d)
	}
	got := rcv.requests()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	for i, r := range got {
		if r.id != d.ID || r.id != got[0].id {
			t.Errorf("attempt %d: webhook-id %q, want %q on every attempt", i, r.id, d.ID)
		}
		ts, err := strconv.ParseInt(r.ts, 10, 64)
		if err != nil || time.Since(time.Unix(ts, 0)) > time.Minute {
			t.Errorf("attempt %d: webhook-timestamp %q", i, r.ts)
		}
		if !webhook.Verify(w.Secret, r.id, ts, r.body, r.sig) {
			t.Errorf("attempt %d: signature %q does not verify", i, r.sig)
		}
		if webhook.Verify("whsec_"+strings.Repeat("A", 44), r.id, ts, r.body, r.sig) {
			t.Errorf("attempt %d: signature verifies under another secret", i)
		}
		var body webhook.Body
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		var ev forge.Event
		if err := json.Unmarshal(body.Data, &ev); err != nil {
			t.Fatal(err)
		}
		var tu forge.Turn
		_ = json.Unmarshal(ev.Data, &tu)
		if body.Type != forge.EventTurnDone || ev.Type != forge.EventTurnDone || tu.ID != turn.ID || body.Timestamp.IsZero() {
			t.Errorf("attempt %d: body %s", i, r.body)
		}
	}
}

func TestLoopbackTargetIsRefusedWithoutTheFlag(t *testing.T) {
	s := openStore(t)
	rcv := newReceiver(t, 204)
	w := newWebhook(t, s, "acme", rcv.URL)
	endTurn(t, s, "acme")
	// One attempt only: the backoff is beyond the 24 h limit.
	start(t, s, webhook.Config{Backoff: []time.Duration{30 * time.Hour}})
	d := settled(t, s, "acme", w.ID)
	if d.Status != forge.DeliveryFailed || !strings.Contains(d.Error, "loopback") || d.ResponseCode != 0 {
		t.Fatalf("delivery = %+v, want failed, refused as loopback", d)
	}
	if n := len(rcv.requests()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests", n)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	s := openStore(t)
	rcv := newReceiver(t, 307)
	w := newWebhook(t, s, "acme", rcv.URL)
	endTurn(t, s, "acme")
	start(t, s, webhook.Config{AllowPrivate: true, Backoff: []time.Duration{30 * time.Hour}})
	d := settled(t, s, "acme", w.ID)
	if d.Status != forge.DeliveryFailed || d.ResponseCode != 307 || !strings.Contains(d.Error, "redirects are not followed") {
		t.Fatalf("delivery = %+v", d)
	}
	if n := len(rcv.requests()); n != 1 {
		t.Fatalf("%d requests, want 1 (the redirect not followed)", n)
	}
}

func TestSlowEndpointTimesOutAndIsRetried(t *testing.T) {
	s := openStore(t)
	var mu sync.Mutex
	calls := 0
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.WriteHeader(200)
	}))
	defer slow.Close()
	w := newWebhook(t, s, "acme", slow.URL)
	endTurn(t, s, "acme")
	start(t, s, webhook.Config{AllowPrivate: true, Timeout: 200 * time.Millisecond})
	d := settled(t, s, "acme", w.ID)
	if d.Status != forge.DeliveryDelivered || d.Attempts != 2 {
		t.Fatalf("delivery = %+v, want delivered on the second attempt", d)
	}
}

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url          string
		allowPrivate bool
		refused      string
	}{
		{"https://93.184.216.34/hook", false, ""},
		{"http://127.0.0.1:8080/hook", false, "loopback"},
		{"http://127.0.0.1:8080/hook", true, ""},
		{"http://[::1]/hook", false, "loopback"},
		{"http://10.1.2.3/hook", false, "private"},
		{"http://192.168.1.1/hook", false, "private"},
		{"http://100.64.0.1/hook", false, "private"},
		{"http://169.254.169.254/latest/meta-data", false, "link-local"},
		{"http://169.254.169.254/latest/meta-data", true, "link-local"}, // never, even with the flag
		{"http://[fe80::1]/hook", true, "link-local"},
		{"http://10.1.2.3/hook", true, ""},
		{"http://[::ffff:127.0.0.1]/hook", false, "loopback"},
		{"http://0.0.0.0/hook", false, "unspecified"},
		{"http://localhost:9/hook", false, "loopback"},
		{"http://api.localhost/hook", false, "loopback"},
		{"ftp://example.com/hook", false, "scheme"},
		{"https://user:pw@example.com/hook", false, "credentials"},
		{"/relative", false, "scheme"},
		{"https:///nohost", false, "no host"},
		{"https://" + strings.Repeat("a", 3000) + ".com/", false, "longer than"},
		{"https://name.invalid/hook", false, "does not resolve"},
	} {
		err := webhook.URLChecker{AllowPrivate: tc.allowPrivate}.CheckURL(context.Background(), tc.url)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: %v", tc.url, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: error %v, want one saying %q", tc.url, err, tc.refused)
		case tc.refused != "" && !errors.Is(err, forge.ErrInvalid):
			t.Errorf("%s: %v is not ErrInvalid", tc.url, err)
		}
	}
}
