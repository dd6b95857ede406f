package sandbox

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRunTrue measures a trivial command end to end: the launcher
// (a re-exec of this binary), bubblewrap and bash.
func BenchmarkRunTrue(b *testing.B) {
	for _, mode := range commandModes {
		b.Run(mode.name, func(b *testing.B) {
			o := mode.opts
			_, sb := newBox(b, o)
			b.ResetTimer()
			for b.Loop() {
				res, err := sb.Run(context.Background(), "true", 0)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
	}
}

// BenchmarkSnapshot measures a snapshot of a work directory of 1,000 small
// files and one 16 GiB sparse file (compared by metadata, never read).
func BenchmarkSnapshot(b *testing.B) {
	_, sb := newBox(b, Options{UseBwrap: BwrapOff})
	for i := range 1000 {
		writeHost(b, sb.Dir()+"/src/f"+itoa(i)+".txt", "line\n")
	}
	sparse(b, sb.Dir()+"/big.img", 16<<30)
	b.ResetTimer()
	for b.Loop() {
		if _, err := sb.Snapshot(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepSnapshot measures a step that changes one small file in a
// work directory of 1,000 small files, in two sandboxes side by side, one
// step of each per iteration (so that the load of a shared machine falls on
// both alike): track-µs is what every such step costs already (the walk
// before the calls, the walk and the diff after: the floor), snapshot-µs
// the same step keeping a restorable workspace snapshot (after a first
// one, as a session has after its first changing step; past MaxSnapshots
// the oldest are pruned as in a long session), added-µs the difference.
func BenchmarkStepSnapshot(b *testing.B) {
	_, plain := newBox(b, Options{UseBwrap: BwrapOff})
	m2, err := NewManager(b.TempDir(), Options{UseBwrap: BwrapOff, Logger: plain.m.log, UIDBase: DefaultUIDBase + 4_000_000, UIDCount: 10})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m2.Close(context.Background()) })
	kept, _, err := m2.Get(context.Background(), "ses_bench")
	if err != nil {
		b.Fatal(err)
	}
	for _, sb := range []*Sandbox{plain, kept} {
		for i := range 1000 {
			writeHost(b, sb.Dir()+"/src/f"+itoa(i)+".txt", "line "+itoa(i)+"\n")
		}
	}
	step(b, kept, "snap_first", func() { writeHost(b, kept.Dir()+"/src/f0.txt", "first\n") })
	ctx := context.Background()
	var trackTime, keepTime time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		n++
		content := "version " + itoa(n) + "\n"
		start := time.Now()
		changes, err := plain.Track(ctx)
		if err != nil {
			b.Fatal(err)
		}
		writeHost(b, plain.Dir()+"/src/f1.txt", content)
		if p, err := changes(ctx); err != nil || len(p.Files) != 1 {
			b.Fatalf("%+v %v", p, err)
		}
		mid := time.Now()
		snapChanges, err := kept.TrackSnapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		writeHost(b, kept.Dir()+"/src/f1.txt", content)
		p, snap, err := snapChanges(ctx, func() string { return "snap_" + itoa(n) })
		if err != nil || len(p.Files) != 1 || snap == nil || snap.Partial {
			b.Fatalf("%+v %+v %v", p, snap, err)
		}
		end := time.Now()
		trackTime += mid.Sub(start)
		keepTime += end.Sub(mid)
	}
	b.ReportMetric(float64(trackTime.Microseconds())/float64(n), "track-µs")
	b.ReportMetric(float64(keepTime.Microseconds())/float64(n), "snapshot-µs")
	b.ReportMetric(float64((keepTime-trackTime).Microseconds())/float64(n), "added-µs")
}
