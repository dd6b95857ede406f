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
	FirstRender float64 `json:"first"`  // the latest page of history is in the DOM, scrolled to its end
	IndexLoaded float64 `json:"index"`  // every turn is numbered and the older history cut into pages
	FirstPaint  float64 `json:"fcp"`    // first contentful paint
	HTMLBytes   float64 `json:"html"`   // the page itself
	AssetBytes  float64 `json:"assets"` // scripts and style sheet
	DataBytes   float64 `json:"data"`   // API answers (the live stream excluded: it never ends)
	Requests    float64 `json:"requests"`
	Turns       float64 `json:"turns"`    // turns in the DOM
	Messages    float64 `json:"messages"` // messages in the DOM
	Latest      bool    `json:"latest"`   // the newest message is in the DOM
	LongestTask float64 `json:"longest"`  // the longest main-thread task, 0 if none reached 50 ms
}

func measureLoad(latest string) string {
	return `(() => {
	const nav = performance.getEntriesByType('navigation')[0];
	const res = performance.getEntriesByType('resource');
	const sum = (pred) => res.filter((r) => pred(new URL(r.name).pathname)).reduce((a, r) => a + r.transferSize, 0);
	const mark = (n) => (performance.getEntriesByName(n)[0] || {startTime: -1}).startTime;
	const msgs = document.querySelectorAll('.msg');
	return {
		first: mark('forge:first-render'), index: mark('forge:index-loaded'), fcp: mark('first-contentful-paint'),
		html: nav.transferSize, assets: sum((p) => p.startsWith('/ui/assets/')), data: sum((p) => p.startsWith('/v1/')),
		requests: res.length + 1, turns: document.querySelectorAll('.turn').length, messages: msgs.length,
		latest: msgs.length > 0 && msgs[msgs.length - 1].textContent.includes(` + jsString(latest) + `),
		longest: Math.max(0, ...window.__perf.longTasks),
	};
})()`
}

// benchmarkSessionPage loads /ui/sessions/{sid} of a session of n echo
// turns (2n messages) in headless Chromium with the cache disabled (every
// load is a cold one) and reports the time to the latest page rendered,
// to the turn index complete, the bytes transferred until then, what the
// DOM holds and the longest main-thread task. Run it with
// ./web/browsertest.sh -run '^$' -bench SessionPage.
func benchmarkSessionPage(b *testing.B, n int) {
	s := newServer(b)
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	ses := seedEchoSession(b, s, "echo", fmt.Sprintf("%d messages", 2*n), n)
	br := newBrowser(b)
	installProbe(br, "")
	if _, err := chromedp.Call(br.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		b.Fatal(err)
	}
	latest := fmt.Sprintf("echo: message #%d", n-1)
	var total pageLoad
	count := 0
	for b.Loop() {
		br.navigate(s.URL + "/ui/sessions/" + ses.ID)
		br.waitFor(`document.body.dataset.state === 'live' && document.body.dataset.index === 'complete'`)
		m := eval[pageLoad](br, measureLoad(latest))
		if !m.Latest {
			b.Fatalf("the newest message is not in the DOM (%v messages in %v turns)", m.Messages, m.Turns)
		}
		total.FirstRender += m.FirstRender
		total.IndexLoaded += m.IndexLoaded
		total.FirstPaint += m.FirstPaint
		total.LongestTask = max(total.LongestTask, m.LongestTask)
		total.HTMLBytes, total.AssetBytes, total.DataBytes, total.Requests = m.HTMLBytes, m.AssetBytes, m.DataBytes, m.Requests
		total.Messages = m.Messages
		count++
	}
	f := float64(count)
	b.ReportMetric(total.FirstRender/f, "ms-latest-rendered")
	b.ReportMetric(total.IndexLoaded/f, "ms-index-complete")
	b.ReportMetric(total.FirstPaint/f, "ms-first-paint")
	b.ReportMetric(total.LongestTask, "ms-longest-task")
	b.ReportMetric((total.HTMLBytes+total.AssetBytes)/1024, "KB-page")
	b.ReportMetric(total.DataBytes/1024, "KB-data")
	b.ReportMetric(total.Requests, "requests")
	b.ReportMetric(total.Messages, "dom-messages")
}

func BenchmarkSessionPage1000Messages(b *testing.B)  { benchmarkSessionPage(b, 500) }
func BenchmarkSessionPage10000Messages(b *testing.B) { benchmarkSessionPage(b, 5000) }

// BenchmarkSessionPageWeight loads the page of a one-turn session cold and
// reports what the page itself weighs (HTML, scripts, style sheet).
func BenchmarkSessionPageWeight(b *testing.B) {
	s := newServer(b)
	s.createAgent(map[string]any{"name": "echo", "model": "scripted/echo"})
	ses := s.createSession("echo", "One turn")
	s.turn(ses.ID, "hello")
	br := newBrowser(b)
	installProbe(br, "")
	if _, err := chromedp.Call(br.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		b.Fatal(err)
	}
	var m pageLoad
	for b.Loop() {
		br.navigate(s.URL + "/ui/sessions/" + ses.ID)
		br.waitFor(`document.body.dataset.state === 'live'`)
		m = eval[pageLoad](br, measureLoad("echo: hello"))
	}
	b.ReportMetric(m.HTMLBytes/1024, "KB-html")
	b.ReportMetric(m.AssetBytes/1024, "KB-assets")
	b.ReportMetric(m.DataBytes/1024, "KB-data")
	b.ReportMetric(m.FirstRender, "ms-first-render")
}
