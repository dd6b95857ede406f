package sandbox

import (
	"context"
	"testing"
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
// work directory of 1,000 small files: "track" is what every such step
// costs already (the walk before the calls, the walk and the diff after:
// the floor), "track+snapshot" adds keeping a restorable workspace
// snapshot (after a first one, as a session has after its first changing
// step; past MaxSnapshots the oldest are pruned as in a long session).
func BenchmarkStepSnapshot(b *testing.B) {
	for _, keep := range []bool{false, true} {
		name := "track"
		if keep {
			name = "track+snapshot"
		}
		b.Run(name, func(b *testing.B) {
			_, sb := newBox(b, Options{UseBwrap: BwrapOff})
			for i := range 1000 {
				writeHost(b, sb.Dir()+"/src/f"+itoa(i)+".txt", "line "+itoa(i)+"\n")
			}
			if keep {
				step(b, sb, "snap_first", func() { writeHost(b, sb.Dir()+"/src/f0.txt", "first\n") })
			}
			ctx := context.Background()
			n := 0
			b.ResetTimer()
			for b.Loop() {
				n++
				content := "version " + itoa(n) + "\n"
				if !keep {
					changes, err := sb.Track(ctx)
					if err != nil {
						b.Fatal(err)
					}
					writeHost(b, sb.Dir()+"/src/f1.txt", content)
					if p, err := changes(ctx); err != nil || len(p.Files) != 1 {
						b.Fatalf("%+v %v", p, err)
					}
					continue
				}
				changes, err := sb.TrackSnapshot(ctx)
				if err != nil {
					b.Fatal(err)
				}
				writeHost(b, sb.Dir()+"/src/f1.txt", content)
				p, snap, err := changes(ctx, func() string { return "snap_" + itoa(n) })
				if err != nil || len(p.Files) != 1 || snap == nil || snap.Partial {
					b.Fatalf("%+v %+v %v", p, snap, err)
				}
			}
		})
	}
}
