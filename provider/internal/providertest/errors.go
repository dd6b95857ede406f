package providertest

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// errorTests: failures before the first byte of output are ModelErrors
// that say what the wrapper needs to know: the status, whether a retry
// can help and when, whether the prompt was too long.
var errorTests = []test{
	{"Status", func(f *fixture) {
		testFailures(f, []failureRow{
			{"429", fakeapi.Failure(429, "Rate limit reached for requests."), 429, true, "Rate limit reached for requests."},
			{"500", fakeapi.Failure(500, "kaput"), 500, true, "kaput"},
			{"503", fakeapi.Failure(503, "overloaded"), 503, true, "overloaded"},
			{"400", fakeapi.Failure(400, "max_tokens is too large"), 400, false, "max_tokens is too large"},
			{"401", fakeapi.Failure(401, "invalid key"), 401, false, "invalid key"},
			{"403", fakeapi.Failure(403, "no permission"), 403, false, "no permission"},
			{"404", fakeapi.Failure(404, "no such model"), 404, false, "no such model"},
		})
	}},
	{"RetryAfter", func(f *fixture) {
		for _, row := range []struct {
			name     string
			reply    fakeapi.Reply
			min, max time.Duration
		}{
			{"seconds", fakeapi.Failure(429, "slow down").Header("Retry-After", "7"), 7 * time.Second, 7 * time.Second},
			{"milliseconds", fakeapi.Failure(429, "slow down").Header("Retry-After-Ms", "250"), 250 * time.Millisecond, 250 * time.Millisecond},
			{"503", fakeapi.Failure(503, "busy").Header("Retry-After", "12"), 12 * time.Second, 12 * time.Second},
			{"HTTP date", fakeapi.Failure(503, "busy").Header("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat)),
				25 * time.Second, 31 * time.Second},
		} {
			f.sub(row.name, func(f *fixture) {
				f.respond(row.reply)
				me := f.modelError(f.call(hello()).err)
				if !me.Retryable || me.RetryAfter < row.min || me.RetryAfter > row.max {
					f.Errorf("error %+v, want retryable after %v to %v", *me, row.min, row.max)
				}
			})
		}
	}},
	{"ErrorBodies", func(f *fixture) {
		// Bodies that are not the API's error object (a proxy's, a
		// gateway's) are passed on as the message.
		testFailures(f, []failureRow{
			{"503 plain text", fakeapi.RawFailure(503, "upstream overloaded"), 503, true, "upstream overloaded"},
			{"502 html", fakeapi.RawFailure(502, "<html>bad gateway</html>"), 502, true, "<html>bad gateway</html>"},
			{"404 other JSON", fakeapi.RawFailure(404, `{"detail":"Not Found"}`), 404, false, `{"detail":"Not Found"}`},
		})
	}},
	{"ContextOverflow", func(f *fixture) {
		f.respond(fakeapi.ContextOverflow())
		r := f.call(hello())
		me := f.modelError(r.err)
		if me.StatusCode != 400 || me.Retryable || !me.ContextOverflow {
			f.Errorf("error %+v, want a 400 context overflow, not retryable", *me)
		}
	}},
	{"BadRequests", func(f *fixture) {
		// Refused before anything is sent.
		for _, row := range []struct {
			name string
			req  forge.ModelRequest
			msg  string
		}{
			{"unknown role", forge.ModelRequest{Messages: []forge.ModelMessage{{Role: "system"}}}, `unknown role "system"`},
			{"bad schema", forge.ModelRequest{Messages: hello().Messages, Tools: []forge.ToolDef{
				{Name: "x", InputSchema: json.RawMessage(`[1]`)}}}, `tool "x": input schema is not a JSON object`},
		} {
			f.sub(row.name, func(f *fixture) {
				me := f.modelError(f.call(&row.req).err)
				if me.Retryable {
					f.Errorf("error %+v is retryable", *me)
				}
				f.contains(me.Message, row.msg)
				f.received(0)
			})
		}
	}},
	{"RefusedHistory", func(f *fixture) {
		// The fake refuses, as the API does, a history it cannot take;
		// the refusal comes back as a final 400 and takes no reply.
		call := assistant(callPart("call_1", "x", `{}`))
		for _, row := range []struct {
			name string
			msgs []forge.ModelMessage
			msg  string
		}{
			{"unanswered call", []forge.ModelMessage{user("go"), call, user("what now?")}, "call_1"},
			{"unanswered call last", []forge.ModelMessage{user("go"), call}, "call_1"},
			{"result without its call", []forge.ModelMessage{user("go"), toolResults(resultPart("call_9", "x"))}, ""},
		} {
			f.sub(row.name, func(f *fixture) {
				f.respond(fakeapi.Text("never served"))
				me := f.modelError(f.call(&forge.ModelRequest{Messages: row.msgs}).err)
				if me.StatusCode != 400 || me.Retryable {
					f.Errorf("error %+v, want a final 400", *me)
				}
				f.contains(me.Message, row.msg)
				if f.fake.Pending() != 1 {
					f.Error("the refused request took the queued reply")
				}
			})
		}
	}},
}

type failureRow struct {
	name      string
	reply     fakeapi.Reply
	status    int
	retryable bool
	message   string
}

func testFailures(f *fixture, rows []failureRow) {
	for _, row := range rows {
		f.sub(row.name, func(f *fixture) {
			f.respond(row.reply)
			r := f.call(hello())
			if len(r.got) != 0 {
				f.Errorf("events before the error: %q", r.got)
			}
			me := f.modelError(r.err)
			if me.StatusCode != row.status || me.Retryable != row.retryable || me.ContextOverflow || me.Provider == "" {
				f.Errorf("error %+v, want status %d retryable %v", *me, row.status, row.retryable)
			}
			f.contains(me.Message, row.message)
			// The SDK must not retry: the wrapper does.
			f.received(1)
		})
	}
}
