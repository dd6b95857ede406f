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
