package web_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/server"
)

// waitUntil polls cond (API reads, not the page) until it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestWebhooksPages: the index links to the webhooks page, which lists
// the tenant's webhooks; a webhook's page shows its recent deliveries:
// a receiver that answers 503 leaves a pending delivery with the response
// code, the error and when it is retried.
func TestWebhooksPages(t *testing.T) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(receiver.Close)
	s := newServer(t, func(c *server.Config) { c.AllowPrivateWebhooks = true; c.WebhookPoll = 20 * time.Millisecond })
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	var hook struct {
		ID string `json:"id"`
	}
	s.call("POST", "/v1/webhooks", map[string]any{"url": receiver.URL + "/hook", "events": []string{"turn.done"}, "description": "ops <b>bot</b>"}, 201, &hook)
	ses := s.createSession("echo", "Hooked")
	s.turn(ses.ID, "hello")
	var d forge.WebhookDelivery
	waitUntil(t, "a failed attempt", func() bool {
		var page struct{ Data []forge.WebhookDelivery }
		s.call("GET", "/v1/webhooks/"+hook.ID+"/deliveries", nil, 200, &page)
		if len(page.Data) == 1 && page.Data[0].Attempts > 0 {
			d = page.Data[0]
			return true
		}
		return false
	})
	if d.Status != forge.DeliveryPending || d.ResponseCode != 503 || d.NextAttemptAt == nil {
		t.Fatalf("delivery %+v", d)
	}

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/")
	b.waitFor(`document.body.dataset.state === 'ready'`)
	follow(b, s.URL, `nav.nav a[href="/ui/webhooks"]`)
	b.waitFor(`location.pathname === '/ui/webhooks' && document.body.dataset.state === 'ready'`)
	row := eval[string](b, `[...document.querySelector('#rows tr[data-id="`+hook.ID+`"]').cells].map(c => c.textContent).join('|')`)
	if !strings.HasPrefix(row, receiver.URL+"/hook|turn.done|ops <b>bot</b>|"+hook.ID+"|") {
		t.Fatalf("webhook row %q", row)
	}
	follow(b, s.URL, `#rows tr[data-id="`+hook.ID+`"] a`)
	b.waitFor(`location.pathname === '/ui/webhooks/` + hook.ID + `' && document.body.dataset.state === 'ready'`)
	cells := eval[[]string](b, `[...document.querySelector('#rows tr[data-id="`+d.ID+`"]').cells].map(c => c.textContent)`)
	if len(cells) != 8 || cells[0] != "pending" || cells[1] != "turn.done #"+strconv.FormatInt(d.Seq, 10) || cells[2] != ses.ID || cells[4] != "503" ||
		!strings.Contains(cells[5], "503") || cells[7] == "—" || cells[7] == "" {
		t.Fatalf("delivery row %q (delivery %+v)", cells, d)
	}
	if href := eval[string](b, `document.querySelector('#rows tr[data-id="`+d.ID+`"] a').getAttribute('href')`); href != "/ui/sessions/"+ses.ID {
		t.Fatalf("session link %q", href)
	}
	if got := eval[string](b, `document.getElementById('detail').textContent`); !strings.Contains(got, receiver.URL+"/hook") {
		t.Fatalf("detail %q", got)
	}
	b.screenshot("webhook.png")

	// Unknown: the page says so.
	b.navigate(s.URL + "/ui/webhooks/wh_nope")
	b.waitFor(`document.body.dataset.state === 'failed' && document.getElementById('banner').textContent.includes('Loading failed')`)
}

// TestSchedulesPages: the schedules page lists a schedule with its next
// run and a pause button that pauses it (and then resumes it); its page
// lists its runs, each linked to the session of the turn it started.
func TestSchedulesPages(t *testing.T) {
	s := newServer(t, func(c *server.Config) { c.ScheduleInterval = 20 * time.Millisecond })
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	var sch forge.Schedule
	s.call("POST", "/v1/schedules", map[string]any{"agent": "echo", "every": "1s", "input": []any{map[string]any{"type": "message", "text": "tick"}}}, 201, &sch)
	var run forge.ScheduleRun
	waitUntil(t, "a run with its turn", func() bool {
		var page struct{ Data []forge.ScheduleRun }
		s.call("GET", "/v1/schedules/"+sch.ID+"/runs", nil, 200, &page)
		for _, r := range page.Data {
			if r.TurnID != nil && r.SessionID != nil {
				run = r
				return true
			}
		}
		return false
	})

	b := newBrowser(t)
	b.navigate(s.URL + "/ui/")
	b.waitFor(`document.body.dataset.state === 'ready'`)
	follow(b, s.URL, `nav.nav a[href="/ui/schedules"]`)
	b.waitFor(`location.pathname === '/ui/schedules' && document.body.dataset.state === 'ready'`)
	sel := `#rows tr[data-id="` + sch.ID + `"]`
	row := eval[[]string](b, `[...document.querySelector('`+sel+`').cells].map(c => c.textContent)`)
	if len(row) != 7 || row[0] != "echo" || row[1] != "every 1s" || row[2] != "active" || row[3] == "—" || row[4] != "new each run" || row[6] != "Pause" {
		t.Fatalf("schedule row %q", row)
	}
	paused := func() bool {
		var got forge.Schedule
		s.call("GET", "/v1/schedules/"+sch.ID, nil, 200, &got)
		return got.Paused
	}
	runJS(b, `document.querySelector('`+sel+` button.toggle').click()`)
	b.waitFor(`document.querySelector('` + sel + `').dataset.paused === 'true'`)
	if !paused() {
		t.Fatal("the pause button did not pause the schedule")
	}
	if got := eval[string](b, `document.querySelector('`+sel+`').cells[2].textContent + '|' + document.querySelector('`+sel+` button.toggle').textContent`); got != "paused|Resume" {
		t.Fatalf("paused row %q", got)
	}
	runJS(b, `document.querySelector('`+sel+` button.toggle').click()`)
	b.waitFor(`document.querySelector('` + sel + `').dataset.paused === 'false'`)
	if paused() {
		t.Fatal("the resume button did not resume the schedule")
	}

	follow(b, s.URL, sel+` a`)
	b.waitFor(`location.pathname === '/ui/schedules/` + sch.ID + `' && document.body.dataset.state === 'ready'`)
	runRow := `#rows tr[data-id="` + run.ID + `"]`
	if href := eval[string](b, `document.querySelector('`+runRow+` a').getAttribute('href')`); href != "/ui/sessions/"+*run.SessionID+"#"+*run.TurnID {
		t.Fatalf("turn link %q", href)
	}
	if got := eval[string](b, `document.querySelector('`+runRow+`').cells[2].textContent`); got != "started" {
		t.Fatalf("run status %q", got)
	}
	// The page's own button pauses it too.
	runJS(b, `document.querySelector('#detail button.toggle').click()`)
	b.waitFor(`document.getElementById('detail').dataset.paused === 'true'`)
	if !paused() {
		t.Fatal("the detail page's button did not pause the schedule")
	}
	b.screenshot("schedule.png")
	b.checkConsole()
}

// follow opens the page a link of this page points to (reading its href
// and navigating: a click that loads a page would race the wait's
// evaluation context).
func follow(b *browser, base, sel string) {
	b.t.Helper()
	href := eval[string](b, `document.querySelector('`+sel+`').getAttribute('href')`)
	if !strings.HasPrefix(href, "/ui/") {
		b.t.Fatalf("link %s: href %q", sel, href)
	}
	b.navigate(base + href)
}

// runJS runs a statement in the page (a DOM click: no pointer, no
// layout to wait for).
func runJS(b *browser, js string) {
	b.t.Helper()
	b.do(chromedp.Evaluate[chromedp.Void](js))
}
