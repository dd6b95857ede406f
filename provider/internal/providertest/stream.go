package providertest

import (
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// streamTests: what the model says comes out as the same events from
// every provider.
var streamTests = []test{
	{"Text", func(f *fixture) {
		f.respond(fakeapi.Text("Hello ", "world").Usage(usage(7, 2)))
		f.events(f.call(hello()), "text+", "text:Hello ", "text:world", "text-", "finish:stop in=7 out=2 read=0 write=0 think=0")
	}},
	{"Reasoning", func(f *fixture) {
		f.respond(fakeapi.Reasoning("Hmm, ", "thinking.").Text("Done").
			Usage(fakeapi.Usage{Input: 5, Output: 9, CacheRead: 3, Reasoning: 6}))
		f.events(f.call(hello()), "reason+", "reason:Hmm, ", "reason:thinking.", "reason-", "text+", "text:Done", "text-",
			"finish:stop in=5 out=9 read=3 write=0 think=6")
	}},
	{"ToolCall", func(f *fixture) {
		f.respond(fakeapi.Calls(fakeapi.Call{ID: "call_a", Name: "read_file", Args: `{"path":"a.txt"}`}).Usage(usage(3, 4)))
		f.events(f.call(hello()), `call:call_a read_file {"path":"a.txt"}`, "finish:tool_calls in=3 out=4 read=0 write=0 think=0")
	}},
	{"ParallelCalls", func(f *fixture) {
		// Arguments long enough to come in several fragments; a call
		// without arguments has {}.
		f.respond(fakeapi.Text("Checking.").Calls(
			fakeapi.Call{ID: "call_a", Name: "read_file", Args: `{"path":"some/long/path/name.txt"}`},
			fakeapi.Call{ID: "call_b", Name: "list_files", Args: `{"dir":"."}`},
			fakeapi.Call{ID: "call_c", Name: "noargs"},
		).Usage(usage(30, 20)))
		f.events(f.call(hello()), "text+", "text:Checking.", "text-",
			`call:call_a read_file {"path":"some/long/path/name.txt"}`,
			`call:call_b list_files {"dir":"."}`,
			`call:call_c noargs {}`,
			"finish:tool_calls in=30 out=20 read=0 write=0 think=0")
	}},
	{"InvalidArguments", func(f *fixture) {
		// Passed on raw: the engine answers the call with an error the
		// model can correct.
		f.respond(fakeapi.Calls(fakeapi.Call{ID: "call_x", Name: "x", Args: `{"a":`}).Usage(usage(1, 1)))
		f.events(f.call(hello()), `call:call_x x {"a":`, "finish:tool_calls in=1 out=1 read=0 write=0 think=0")
	}},
	{"TwoTextBlocks", func(f *fixture) {
		f.respond(fakeapi.Text("a").Text("b").Usage(usage(1, 1)))
		f.events(f.call(hello()), "text+", "text:a", "text-", "text+", "text:b", "text-", "finish:stop in=1 out=1 read=0 write=0 think=0")
	}},
	{"FinishLength", func(f *fixture) {
		f.respond(fakeapi.Text("cut").Finish(forge.FinishLength).Usage(usage(4, 1)))
		f.events(f.call(hello()), "text+", "text:cut", "text-", "finish:length in=4 out=1 read=0 write=0 think=0")
	}},
	{"FinishContentFilter", func(f *fixture) {
		f.respond(fakeapi.Text("Sorry").Finish(forge.FinishFilter).Usage(usage(4, 1)))
		f.events(f.call(hello()), "text+", "text:Sorry", "text-", "finish:content_filter in=4 out=1 read=0 write=0 think=0")
	}},
	{"EmptyReply", func(f *fixture) {
		f.respond(fakeapi.Reply{}.Usage(usage(4, 0)))
		f.events(f.call(hello()), "finish:stop in=4 out=0 read=0 write=0 think=0")
	}},
	{"EmptyText", func(f *fixture) {
		// A text block without text is no text.
		f.respond(fakeapi.Text().Usage(usage(4, 0)))
		f.events(f.call(hello()), "finish:stop in=4 out=0 read=0 write=0 think=0")
	}},
	{"Usage", func(f *fixture) {
		testUsage(f, []usageRow{
			{"no cache", fakeapi.Usage{Input: 1000, Output: 500}},
			{"cache read and reasoning", fakeapi.Usage{Input: 1000, CacheRead: 400, Output: 200, Reasoning: 50}},
		})
	}},
	{"UsageCacheWrite", func(f *fixture) {
		// InputTokens is the whole prompt, cache reads and writes
		// included, whatever the API counts apart.
		testUsage(f, []usageRow{
			{"read and write", fakeapi.Usage{Input: 10000, CacheRead: 8000, CacheWrite: 1000, Output: 500}},
			{"write only", fakeapi.Usage{Input: 4050, CacheWrite: 4000, Output: 200}},
		})
	}},
	{"UsageEstimate", func(f *fixture) {
		// Without scripted usage the fake reports an estimate, which
		// grows with the prompt: the provider passes it on.
		in := func(text string) forge.Usage {
			f.respond(fakeapi.Text("ok"))
			r := f.call(&forge.ModelRequest{Messages: []forge.ModelMessage{user(text)}})
			if r.err != nil || r.finish() == nil {
				f.Fatalf("events %q, %v", r.got, r.err)
			}
			return r.finish().Usage
		}
		small, big := in("hi"), in(strings.Repeat("word ", 400))
		if small.InputTokens < 1 || small.OutputTokens < 1 || big.InputTokens <= small.InputTokens {
			f.Errorf("usage small %+v big %+v", small, big)
		}
	}},
}

type usageRow struct {
	name string
	u    fakeapi.Usage
}

func testUsage(f *fixture, rows []usageRow) {
	for _, row := range rows {
		f.sub(row.name, func(f *fixture) {
			f.respond(fakeapi.Text("ok").Usage(row.u))
			r := f.call(hello())
			if r.err != nil || r.finish() == nil {
				f.Fatalf("events %q, %v", r.got, r.err)
			}
			want := forge.Usage{InputTokens: int64(row.u.Input), OutputTokens: int64(row.u.Output),
				CacheReadTokens: int64(row.u.CacheRead), CacheWriteTokens: int64(row.u.CacheWrite), ReasoningTokens: int64(row.u.Reasoning)}
			f.same(r.finish().Usage, want, "usage")
		})
	}
}
