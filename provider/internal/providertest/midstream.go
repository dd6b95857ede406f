package providertest

import (
	"context"
	"time"

	"github.com/forge-runtime/forge/provider/internal/fakeapi"
)

// midStreamTests: a stream that fails, is cut or stops short after output
// began passes on what came and fails with a retryable ModelError (the
// wrapper does not retry once output was passed on); one cut after the
// reply was complete is not a failure.
var midStreamTests = []test{
	{"Cut", func(f *fixture) {
		f.respond(fakeapi.Text("a ", "b ", "c ", "d").CutAt(fakeapi.AfterDeltas(2)))
		f.streamFails(f.call(hello()), []string{"a ", "b "}, "ended before the response was complete", "interrupted")
	}},
	{"CutBeforeOutput", func(f *fixture) {
		f.respond(fakeapi.Text("a").CutAt(fakeapi.AfterDeltas(0)))
		f.streamFails(f.call(hello()), nil)
	}},
	{"CutBeforeFinish", func(f *fixture) {
		f.respond(fakeapi.Text("a").CutAt(fakeapi.BeforeFinish()))
		f.streamFails(f.call(hello()), []string{"a"}, "ended before the response was complete")
	}},
	{"CutAfterFinish", func(f *fixture) {
		// What comes after the finish (a usage chunk, [DONE],
		// message_stop) is not needed.
		f.respond(fakeapi.Text("a").Usage(usage(3, 1)).CutAt(fakeapi.AfterFinish()))
		r := f.call(hello())
		if r.err != nil || r.finish() == nil || r.finish().Reason != "stop" {
			f.Fatalf("events %q, %v: want a complete reply", r.got, r.err)
		}
		f.same(r.deltas(), []string{"a"}, "deltas")
	}},
	{"Unfinished", func(f *fixture) {
		// The server closes the stream without completing the response
		// (Ollama does when it stops a repetition).
		f.respond(fakeapi.Text("a").Unfinish())
		f.streamFails(f.call(hello()), []string{"a"}, "ended before the response was complete", "the server closed it")
	}},
	{"ErrorEvent", func(f *fixture) {
		f.respond(fakeapi.Text("a ", "b ", "c").FailAt(fakeapi.AfterDeltas(1), "boom"))
		f.streamFails(f.call(hello()), []string{"a "}, "boom")
	}},
	{"ErrorAfterText", func(f *fixture) {
		f.respond(fakeapi.Text("partial ", "answer").FailAt(fakeapi.BeforeFinish(), "connection reset"))
		f.streamFails(f.call(hello()), []string{"partial ", "answer"}, "connection reset")
	}},
	{"LeftOpen", func(f *fixture) {
		// A server that keeps the connection open after the end of the
		// reply does not hold up the call.
		// The deadline makes a provider that waits fail instead of hang.
		f.respond(fakeapi.Text("a").Usage(usage(1, 1)).HangAt(fakeapi.AtEnd()))
		ctx, cancel := context.WithTimeout(f.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		f.events(stream(ctx, f.model(), hello()), "text+", "text:a", "text-", "finish:stop in=1 out=1 read=0 write=0 think=0")
		f.within(time.Since(start), 2*time.Second, "the call")
	}},
}

// streamFails fails unless r passed on the deltas want and then failed
// with a retryable ModelError whose message holds each of subs, without a
// finish.
func (f *fixture) streamFails(r reply, want []string, subs ...string) {
	f.Helper()
	me := f.modelError(r.err)
	if !me.Retryable {
		f.Errorf("error %+v is not retryable", *me)
	}
	f.contains(me.Message, subs...)
	f.same(r.deltas(), want, "deltas")
	if r.finish() != nil {
		f.Errorf("a finish before the error: %q", r.got)
	}
}
