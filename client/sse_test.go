package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/forge-runtime/forge"
)

type goldenFrame struct {
	ID      string `json:"id"`
	HasID   bool   `json:"has_id"`
	Event   string `json:"event"`
	Data    string `json:"data"`
	RetryMS int    `json:"retry_ms"`
}

func readAll(t *testing.T, r io.Reader) ([]Frame, error) {
	t.Helper()
	sr := NewSSEReader(r)
	var out []Frame
	for {
		f, err := sr.Next()
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

func TestSSEFixture(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/frames.sse")
	if err != nil {
		t.Fatal(err)
	}
	gb, err := os.ReadFile("testdata/frames.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden []goldenFrame
	if err := json.Unmarshal(gb, &golden); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]func() io.Reader{
		"whole":    func() io.Reader { return bytes.NewReader(raw) },
		"one-byte": func() io.Reader { return iotest.OneByteReader(bytes.NewReader(raw)) },
		"half":     func() io.Reader { return iotest.HalfReader(bytes.NewReader(raw)) },
	} {
		t.Run(name, func(t *testing.T) {
			frames, err := readAll(t, r())
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("end error = %v, want io.ErrUnexpectedEOF (the trailing frame is incomplete)", err)
			}
			if len(frames) != len(golden) {
				t.Fatalf("got %d frames, want %d: %+v", len(frames), len(golden), frames)
			}
			for i, g := range golden {
				f := frames[i]
				want := Frame{ID: g.ID, HasID: g.HasID, Event: g.Event, Data: g.Data, Retry: time.Duration(g.RetryMS) * time.Millisecond}
				if f != want {
					t.Errorf("frame %d:\n got %#v\nwant %#v", i, f, want)
				}
			}
		})
	}
}

func TestSSECleanEOF(t *testing.T) {
	t.Parallel()
	frames, err := readAll(t, strings.NewReader("data: a\n\n: bye\n"))
	if err != io.EOF || len(frames) != 1 || frames[0].Data != "a" {
		t.Fatalf("frames %+v, err %v; want one frame then io.EOF", frames, err)
	}
	// A comment being read when the stream ends is not a frame.
	frames, err = readAll(t, strings.NewReader("data: a\n\n: partial comm"))
	if err != io.ErrUnexpectedEOF || len(frames) != 1 {
		t.Fatalf("frames %+v, err %v", frames, err)
	}
}

func TestSSELongLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5<<20) // 5 MiB, far beyond bufio's buffer
	stream := "id: 1\nevent: big\ndata: " + long + "\n\nid: 2\ndata: small\n\n"
	for name, r := range map[string]io.Reader{
		"whole": strings.NewReader(stream),
		"half":  iotest.HalfReader(strings.NewReader(stream)),
	} {
		t.Run(name, func(t *testing.T) {
			frames, err := readAll(t, r)
			if err != io.EOF {
				t.Fatalf("err = %v", err)
			}
			if len(frames) != 2 || frames[0].Data != long || frames[1].Data != "small" || frames[1].ID != "2" {
				t.Fatalf("long line not read whole: %d frames", len(frames))
			}
		})
	}
	sr := NewSSEReader(strings.NewReader(stream))
	sr.MaxLine = 1 << 20
	if _, err := sr.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
}

// TestSSETurnFixture reads a whole turn in the API's exact format.
func TestSSETurnFixture(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/turn.sse")
	if err != nil {
		t.Fatal(err)
	}
	frames, err := readAll(t, bytes.NewReader(raw))
	if err != io.EOF {
		t.Fatal(err)
	}
	var last int64
	var text strings.Builder
	for _, f := range frames {
		var ev forge.Event
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			t.Fatalf("frame %s: %v", f.ID, err)
		}
		if f.Event != ev.Type || f.ID == "" {
			t.Errorf("frame id %q event %q, data type %q", f.ID, f.Event, ev.Type)
		}
		if ev.Seq <= last {
			t.Errorf("seq %d after %d", ev.Seq, last)
		}
		last = ev.Seq
		if ev.Type == forge.EventModelDelta && ev.ID == "prt_01J0TEXT" {
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			text.WriteString(d.Delta)
		}
	}
	if len(frames) != 19 || last != 24 {
		t.Errorf("%d frames, last seq %d", len(frames), last)
	}
	if text.String() != "Hello, world!" {
		t.Errorf("deltas joined = %q", text.String())
	}
}
