package web_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// pageLoad is what one load of a page measured, from the browser's own
// performance timeline (milliseconds since navigation start, bytes as
// transferred: headers plus the gzip-compressed body).
type pageLoad struct {
	FirstRender   float64 `json:"first"`  // the first page of history is in the DOM
	HistoryLoaded float64 `json:"all"`    // the whole history is in the DOM
	FirstPaint    float64 `json:"fcp"`    // first contentful paint
	HTMLBytes     float64 `json:"html"`   // the page itself
	AssetBytes    float64 `json:"assets"` // scripts and style sheet
	DataBytes     float64 `json:"data"`   // API answers (the live stream excluded: it never ends)
	Requests      float64 `json:"requests"`
	Turns         float64 `json:"turns"`
	Messages      float64 `json:"messages"`
}

const measureLoad = `(() => {
	const nav = performance.getEntriesByType('navigation')[0];
	const res = performance.getEntriesByType('resource');
	const sum = (pred) => res.filter((r) => pred(new URL(r.name).pathname)).reduce((a, r) => a + r.transferSize, 0);
	const mark = (n) => (performance.getEntriesByName(n)[0] || {startTime: -1}).startTime;
	return {
		first: mark('forge:first-render'), all: mark('forge:history-loaded'), fcp: mark('first-contentful-paint'),
		html: nav.transferSize, assets: sum((p) => p.startsWith('/ui/assets/')), data: sum((p) => p.startsWith('/v1/')),
		requests: res.length + 1, turns: document.querySelectorAll('.turn').length, messages: document.querySelectorAll('.msg').length,
	};
})()`

// BenchmarkSessionPage1000Messages loads /ui/sessions/{sid} of a session
// with 1,000 messages (500 turns) in headless Chromium with the cache
// disabled (every load is a cold one) and reports the time to the first
// rendered page of history, to the whole history, and the bytes
// transferred. Run it with ./web/browsertest.sh -run '^$' -bench SessionPage.
func BenchmarkSessionPage1000Messages(b *testing.B) {
	s := newServer(b)
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	ses := s.createSession("echo", "A thousand messages")
	for i := range 500 {
		s.turn(ses.ID, fmt.Sprintf("message %d: what is the state of order %d?", i, 1000+i))
	}
	br := newBrowser(b)
	if _, err := chromedp.Call(br.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		b.Fatal(err)
	}
	var total pageLoad
	n := 0
	for b.Loop() {
		br.navigate(s.URL + "/ui/sessions/" + ses.ID)
		br.waitFor(`document.body.dataset.state === 'live'`)
		m := eval[pageLoad](br, measureLoad)
		if m.Messages != 1000 || m.Turns != 500 {
			b.Fatalf("the page shows %v messages in %v turns", m.Messages, m.Turns)
		}
		total.FirstRender += m.FirstRender
		total.HistoryLoaded += m.HistoryLoaded
		total.FirstPaint += m.FirstPaint
		total.HTMLBytes, total.AssetBytes, total.DataBytes, total.Requests = m.HTMLBytes, m.AssetBytes, m.DataBytes, m.Requests
		n++
	}
	f := float64(n)
	b.ReportMetric(total.FirstRender/f, "ms-first-render")
	b.ReportMetric(total.HistoryLoaded/f, "ms-all-rendered")
	b.ReportMetric(total.FirstPaint/f, "ms-first-paint")
	b.ReportMetric((total.HTMLBytes+total.AssetBytes)/1024, "KB-page")
	b.ReportMetric(total.DataBytes/1024, "KB-data")
	b.ReportMetric(total.Requests, "requests")
}

// BenchmarkSessionPageWeight loads the page of a one-turn session cold and
// reports what the page itself weighs (HTML, scripts, style sheet).
func BenchmarkSessionPageWeight(b *testing.B) {
	s := newServer(b)
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	ses := s.createSession("echo", "One turn")
	s.turn(ses.ID, "hello")
	br := newBrowser(b)
	if _, err := chromedp.Call(br.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		b.Fatal(err)
	}
	var m pageLoad
	for b.Loop() {
		br.navigate(s.URL + "/ui/sessions/" + ses.ID)
		br.waitFor(`document.body.dataset.state === 'live'`)
		m = eval[pageLoad](br, measureLoad)
	}
	b.ReportMetric(m.HTMLBytes/1024, "KB-html")
	b.ReportMetric(m.AssetBytes/1024, "KB-assets")
	b.ReportMetric(m.DataBytes/1024, "KB-data")
	b.ReportMetric(m.FirstRender, "ms-first-render")
}
