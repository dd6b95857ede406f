package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Frame is one dispatched server-sent event.
type Frame struct {
	// ID is the frame's id field ("" when the frame had none).
	ID string
	// HasID tells an absent id from an empty one.
	HasID bool
	// Event is the event field ("message" when absent).
	Event string
	// Data is the data fields joined by "\n".
	Data string
	// Retry is the retry field, 0 when absent or invalid.
	Retry time.Duration
}

// DefaultMaxLine bounds one SSE line (a data line carries a whole event,
// which may hold a full message with its tool outputs).
const DefaultMaxLine = 64 << 20

// ErrLineTooLong is returned by the SSE reader for a line longer than its
// limit.
var ErrLineTooLong = errors.New("sse: line too long")

// SSEReader parses a text/event-stream (the WHATWG format): lines end with
// LF, CRLF or CR; a blank line dispatches a frame; lines starting with ':'
// are comments; one leading space of a value is dropped; data lines are
// joined with "\n"; a frame with no data is not dispatched. Lines of any
// length up to MaxLine are read whole.
type SSEReader struct {
	r *bufio.Reader
	// MaxLine bounds a line, DefaultMaxLine when 0.
	MaxLine int

	skipLF bool
	line   []byte
}

// NewSSEReader reads frames from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// readLine returns the next line without its terminator. The slice is valid
// until the next call. At EOF an unterminated line is dropped (the format
// discards an incomplete frame) and io.EOF is returned.
func (s *SSEReader) readLine() ([]byte, error) {
	max := s.MaxLine
	if max <= 0 {
		max = DefaultMaxLine
	}
	s.line = s.line[:0]
	for {
		if s.r.Buffered() == 0 {
			if _, err := s.r.Peek(1); err != nil {
				if err == io.EOF && len(s.line) > 0 {
					return nil, io.ErrUnexpectedEOF
				}
				return nil, err
			}
		}
		buf, _ := s.r.Peek(s.r.Buffered())
		if s.skipLF {
			s.skipLF = false
			if buf[0] == '\n' {
				_, _ = s.r.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			if len(s.line)+len(buf) > max {
				return nil, ErrLineTooLong
			}
			s.line = append(s.line, buf...)
			_, _ = s.r.Discard(len(buf))
			continue
		}
		if len(s.line)+i > max {
			return nil, ErrLineTooLong
		}
		s.line = append(s.line, buf[:i]...)
		s.skipLF = buf[i] == '\r'
		_, _ = s.r.Discard(i + 1)
		return s.line, nil
	}
}

// Next returns the next frame. A frame that has an id but no data is
// returned with empty Data (its id still counts as the last event id). Next
// returns io.EOF at a clean end of stream, and io.ErrUnexpectedEOF when the
// stream ended inside a frame.
func (s *SSEReader) Next() (Frame, error) {
	var (
		f       Frame
		data    strings.Builder
		hasData bool
		started bool
	)
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && started {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		if len(line) == 0 {
			if !hasData {
				// A frame without data is not dispatched; its id still
				// counts as the last event id.
				if f.HasID {
					return Frame{ID: f.ID, HasID: true, Retry: f.Retry}, nil
				}
				f, started = Frame{}, false
				continue
			}
			f.Data = data.String()
			if f.Event == "" {
				f.Event = "message"
			}
			return f, nil
		}
		if line[0] == ':' {
			continue
		}
		started = true
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			f.Event = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				f.ID, f.HasID = string(value), true
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 31); err == nil {
				f.Retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}

// String renders a frame in the wire format (for tests and logs).
func (f Frame) String() string {
	var b strings.Builder
	if f.HasID {
		fmt.Fprintf(&b, "id: %s\n", f.ID)
	}
	if f.Event != "" {
		fmt.Fprintf(&b, "event: %s\n", f.Event)
	}
	for _, l := range strings.Split(f.Data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", l)
	}
	b.WriteString("\n")
	return b.String()
}
