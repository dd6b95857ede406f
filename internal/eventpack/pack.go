// Package eventpack is the stored form of the event log: a run of a
// session's events (one write's, or a whole ended turn's) in one body,
// its envelopes and data compressed against a dictionary made of the rows
// the events announce. A model.message event carries its part, a
// message.updated its message, a turn.done its turn: byte for byte what
// the parts, messages and turns tables hold, so the log stores each row
// once (in its table) and, for each event, what differs from it (the
// empty text of a part's start, a tool call still pending, the turn while
// it ran), plus the envelope.
//
// A body names its rows (Refs) and holds a checksum of what it decodes
// to: decoding against rows that are not those it was encoded against
// fails (ErrRowsChanged) instead of yielding other bytes. The rows a body
// refers to must therefore not change once it is written. Stores write a
// running turn's events without refs (only the static dictionary) and
// re-encode them against the turn's rows in the terminal write, after
// which the turn's rows never change (docs/decisions.md); the one later
// update Forge makes, a message's metadata (a published forum reply), is
// left out of the dictionary (see rowBytes).
//
// Everything here is part of the stored format: the static dictionary,
// the type codes and the row encodings (forge's JSON of each row, which
// TestRowEncodingIsFrozen pins) may only change with a new version byte,
// the old version still decoded.
package eventpack

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// formatLZ is the first byte of a body: its payload compressed against
// its dictionary.
const formatLZ = 1

// RefKind is the kind of row a Ref names.
type RefKind byte

const (
	RefTurn RefKind = 't'
	// RefWholeTurn is the turn, then each of its messages (RefMessage)
	// in id order: a whole small turn in one ref.
	RefWholeTurn RefKind = 'T'
	RefMessage   RefKind = 'm' // the message with all its parts, without its metadata
	RefPart      RefKind = 'p'
)

// Ref names a row whose encoding joins a body's dictionary.
type Ref struct {
	Kind RefKind
	// Message is a part's message (RefPart only).
	Message string
	ID      string
}

// Rows holds the rows refs resolve to.
type Rows struct {
	turns    map[string]*forge.Turn
	messages map[string]*forge.Message
	byTurn   map[string][]*forge.Message // in id order
	parts    map[string]*forge.Part
	partMsg  map[string]string // part id -> its message id
}

// NewRows returns an empty set of rows.
func NewRows() *Rows {
	return &Rows{turns: map[string]*forge.Turn{}, messages: map[string]*forge.Message{},
		byTurn: map[string][]*forge.Message{}, parts: map[string]*forge.Part{}, partMsg: map[string]string{}}
}

// AddTurn adds a turn, as the store reads it.
func (r *Rows) AddTurn(t *forge.Turn) { r.turns[t.ID] = t }

// AddMessage adds a message with all its parts in id order, as the store
// reads them. A message is added once.
func (r *Rows) AddMessage(m *forge.Message) {
	if r.messages[m.ID] != nil {
		return
	}
	r.messages[m.ID] = m
	list := r.byTurn[m.TurnID]
	i, _ := slices.BinarySearchFunc(list, m.ID, func(a *forge.Message, id string) int { return strings.Compare(a.ID, id) })
	r.byTurn[m.TurnID] = slices.Insert(list, i, m)
	for _, p := range m.Parts {
		r.parts[p.ID] = p
		r.partMsg[p.ID] = m.ID
	}
}

// Turn returns a turn of r, or nil.
func (r *Rows) Turn(id string) *forge.Turn { return r.turns[id] }

// Message returns a message of r, or nil.
func (r *Rows) Message(id string) *forge.Message { return r.messages[id] }

// TurnMessages returns the messages of turn in r, in id order.
func (r *Rows) TurnMessages(turn string) []*forge.Message { return r.byTurn[turn] }

func (r *Rows) part(ref Ref) *forge.Part {
	if r.partMsg[ref.ID] != ref.Message {
		return nil
	}
	return r.parts[ref.ID]
}

// ErrRowsChanged is the error of a body decoded against rows other than
// those it was encoded against.
var ErrRowsChanged = errors.New("eventpack: the rows an event body refers to changed since it was written")

// Source gives the dictionary bytes of the rows refs name.
type Source interface {
	// RowBytes appends the bytes of the row ref names to dst; an error
	// wrapping ErrRowsChanged when it has no such row.
	RowBytes(dst []byte, ref Ref) ([]byte, error)
}

// RowBytes appends the bytes of a row of r (Source).
func (r *Rows) RowBytes(dst []byte, ref Ref) ([]byte, error) { return rowBytes(dst, ref, r) }

// rowBytes is a ref's contribution to the dictionary: forge's JSON of the
// row, the form in which events carry it. A message goes without its
// metadata, which may change after its turn ended (a published reply is
// marked) and would otherwise make the body undecodable.
func rowBytes(dst []byte, ref Ref, rows *Rows) ([]byte, error) {
	switch ref.Kind {
	case RefTurn:
		if t := rows.turns[ref.ID]; t != nil {
			return appendJSON(dst, t, t.AppendJSON)
		}
	case RefWholeTurn:
		if t := rows.turns[ref.ID]; t != nil {
			dst, err := appendJSON(dst, t, t.AppendJSON)
			for _, m := range rows.TurnMessages(ref.ID) {
				if err != nil {
					break
				}
				dst, err = appendMessage(dst, m)
			}
			return dst, err
		}
	case RefMessage:
		if m := rows.messages[ref.ID]; m != nil {
			return appendMessage(dst, m)
		}
	case RefPart:
		if p := rows.part(ref); p != nil {
			return appendJSON(dst, p, p.AppendJSON)
		}
	}
	return nil, fmt.Errorf("%w: %c %s is missing", ErrRowsChanged, ref.Kind, ref.ID)
}

func appendMessage(dst []byte, m *forge.Message) ([]byte, error) {
	c := *m
	c.Metadata = nil
	return appendJSON(dst, &c, c.AppendJSON)
}

// appendJSON appends v's JSON, by its fast encoder when that is sure of
// it (it writes what json.Marshal writes).
func appendJSON(dst []byte, v any, fast func([]byte) ([]byte, bool)) ([]byte, error) {
	n := len(dst)
	if b, ok := fast(dst); ok {
		return b, nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst[:n], j...), nil
}

// Event type codes (version 1). 0 means the type is spelled out.
var typeCodes = []string{
	"",
	forge.EventTurnCreated, forge.EventTurnDone, forge.EventMessageCreated, forge.EventMessageUpdated,
	forge.EventModelMessage, forge.EventModelDelta, forge.EventToolCall, forge.EventToolResponse,
	forge.EventStepStarted, forge.EventStepFinished, forge.EventPatch, forge.EventActionRequired,
	forge.EventThreadCreated, forge.EventThreadDone, forge.EventMCPInitialized, forge.EventSandboxCreated,
	forge.EventSandboxStopped, forge.EventSessionCompacted, forge.EventForumMessage, forge.EventForumMemberJoined,
	forge.EventForumMemberLeft, forge.EventMonologueCompacted,
}

var typeCode = func() map[string]byte {
	m := make(map[string]byte, len(typeCodes))
	for i, t := range typeCodes[1:] {
		m[t] = byte(i + 1)
	}
	return m
}()

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode packs evs, in seq order with distinct seqs, into a body whose
// dictionary holds the rows refs name (each must be in rows). turn is the
// id most of the events carry (nil when none): it is stored once.
func Encode(evs []forge.Event, turn *string, refs []Ref, rows Source) ([]byte, error) {
	if len(evs) == 0 {
		return nil, errors.New("eventpack: no events to pack")
	}
	refText := appendRefs(nil, refs)
	buf := dicts.Get().(*[]byte)
	defer dicts.Put(buf)
	dict, err := dictionary((*buf)[:0], refText, refs, rows)
	if err != nil {
		return nil, err
	}
	*buf = dict
	size := 16 * len(evs)
	for i := range evs {
		size += len(evs[i].ID) + len(evs[i].Data) + 16
	}
	plain, err := appendPayload(make([]byte, 0, size), evs, turn)
	if err != nil {
		return nil, err
	}
	body := make([]byte, 1, 64+len(plain)/4)
	body[0] = formatLZ
	body = binary.AppendUvarint(body, uint64(len(evs)))
	body = binary.AppendUvarint(body, uint64(len(refText)))
	if len(refText) > 0 {
		z := compress(nil, refText, staticDict)
		body = binary.AppendUvarint(body, uint64(len(z)))
		body = append(body, z...)
	}
	body = binary.AppendUvarint(body, uint64(len(plain)))
	body = binary.LittleEndian.AppendUint32(body, crc32.Checksum(plain, castagnoli))
	return compress(body, plain, dict), nil
}

// Header is what a body says of itself without its rows.
type Header struct {
	Count int
	Refs  []Ref
}

// header reads a body's header; rest is the compressed payload.
type header struct {
	Header
	refText  []byte
	plainLen int
	crc      uint32
	rest     []byte
}

// ReadHeader reads the event count and the refs of a body.
func ReadHeader(body []byte) (Header, error) {
	h, err := readHeader(body)
	return h.Header, err
}

func readHeader(body []byte) (header, error) {
	var h header
	if len(body) == 0 || body[0] != formatLZ {
		return h, fmt.Errorf("%w: unknown format", errCorrupt)
	}
	r := reader{b: body[1:]}
	h.Count = int(r.uvarint(1 << 30))
	if n := int(r.uvarint(1 << 30)); n > 0 && r.err == nil {
		z := r.bytes(int(r.uvarint(uint64(len(r.b)))))
		if r.err != nil {
			return h, r.err
		}
		text, err := decompress(nil, z, staticDict, n)
		if err != nil {
			return h, err
		}
		h.refText = text
		if h.Refs, err = parseRefs(text); err != nil {
			return h, err
		}
	}
	h.plainLen = int(r.uvarint(1 << 40))
	if len(r.b) < 4 {
		r.err = errCorrupt
	}
	if r.err != nil {
		return h, r.err
	}
	h.crc = binary.LittleEndian.Uint32(r.b)
	h.rest = r.b[4:]
	return h, nil
}

// Decode unpacks a body of session sessionID against the rows its refs
// name (rows may hold more).
func Decode(body []byte, sessionID string, rows Source) ([]forge.Event, error) {
	h, err := readHeader(body)
	if err != nil {
		return nil, err
	}
	buf := dicts.Get().(*[]byte)
	defer dicts.Put(buf)
	dict, err := dictionary((*buf)[:0], h.refText, h.Refs, rows)
	if err != nil {
		return nil, err
	}
	*buf = dict
	plain, err := decompress(nil, h.rest, dict, h.plainLen)
	if err != nil {
		if len(h.Refs) > 0 {
			// A dictionary of other rows makes distances point elsewhere.
			return nil, fmt.Errorf("%w (%v)", ErrRowsChanged, err)
		}
		return nil, err
	}
	if crc32.Checksum(plain, castagnoli) != h.crc {
		if len(h.Refs) > 0 {
			return nil, ErrRowsChanged
		}
		return nil, fmt.Errorf("%w: checksum", errCorrupt)
	}
	return parsePayload(plain, sessionID, h.Count)
}

// dicts pools the buffers dictionaries are built in.
var dicts = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// dictionary appends to d the static dictionary, the refs and their rows.
func dictionary(d, refText []byte, refs []Ref, rows Source) ([]byte, error) {
	if len(refs) == 0 {
		return append(d, staticDict...), nil
	}
	d = append(append(d, staticDict...), refText...)
	for _, ref := range refs {
		var err error
		if d, err = rows.RowBytes(d, ref); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func appendRefs(dst []byte, refs []Ref) []byte {
	for _, r := range refs {
		dst = append(dst, byte(r.Kind))
		if r.Kind == RefPart {
			dst = appendString(dst, r.Message)
		}
		dst = appendString(dst, r.ID)
	}
	return dst
}

func parseRefs(b []byte) ([]Ref, error) {
	r := reader{b: b}
	var refs []Ref
	for len(r.b) > 0 && r.err == nil {
		ref := Ref{Kind: RefKind(r.byte())}
		switch ref.Kind {
		case RefTurn, RefWholeTurn, RefMessage:
		case RefPart:
			ref.Message = r.string()
		default:
			return nil, errCorrupt
		}
		ref.ID = r.string()
		refs = append(refs, ref)
	}
	return refs, r.err
}

// Envelope fields that repeat from one event to the next cost a byte.
const (
	absent  = 0 // nil
	same    = 1 // the body's turn; the previous event's thread
	literal = 2 // spelled out
)

func appendPayload(dst []byte, evs []forge.Event, turn *string) ([]byte, error) {
	dst = appendOptString(dst, turn)
	var (
		prevSeq    int64
		prevTime   int64
		prevThread *string
	)
	for i := range evs {
		e := &evs[i]
		if e.Seq <= prevSeq {
			return nil, fmt.Errorf("eventpack: seq %d after %d", e.Seq, prevSeq)
		}
		dst = binary.AppendUvarint(dst, uint64(e.Seq-prevSeq))
		prevSeq = e.Seq
		if c, ok := typeCode[e.Type]; ok {
			dst = append(dst, c)
		} else {
			dst = appendString(append(dst, 0), e.Type)
		}
		if idLeadsData(e.ID, e.Data) {
			dst = append(dst, same)
		} else {
			dst = appendString(append(dst, literal), e.ID)
		}
		switch {
		case e.TurnID == nil:
			dst = append(dst, absent)
		case turn != nil && *e.TurnID == *turn:
			dst = append(dst, same)
		default:
			dst = appendString(append(dst, literal), *e.TurnID)
		}
		switch {
		case e.ThreadID == nil:
			dst = append(dst, absent)
		case prevThread != nil && *e.ThreadID == *prevThread:
			dst = append(dst, same)
		default:
			dst = appendString(append(dst, literal), *e.ThreadID)
		}
		prevThread = e.ThreadID
		t := e.CreatedAt.UnixNano()
		dst = binary.AppendVarint(dst, t-prevTime)
		prevTime = t
		if len(e.Data) == 0 {
			dst = append(dst, 0) // stored as NULL, read back nil, as before
		} else {
			dst = binary.AppendUvarint(dst, uint64(len(e.Data))+1)
			dst = append(dst, e.Data...)
		}
	}
	return dst, nil
}

func parsePayload(b []byte, sessionID string, count int) ([]forge.Event, error) {
	r := reader{b: b}
	turn := r.optString()
	out := make([]forge.Event, 0, min(count, 1<<16))
	var (
		seq, nanos int64
		thread     *string
	)
	for len(r.b) > 0 && r.err == nil {
		var e forge.Event
		seq += int64(r.uvarint(1 << 62))
		e.Seq, e.SessionID = seq, sessionID
		if c := r.byte(); c != 0 {
			if int(c) >= len(typeCodes) {
				return nil, errCorrupt
			}
			e.Type = typeCodes[c]
		} else {
			e.Type = r.string()
		}
		idFrom := r.byte()
		switch idFrom {
		case same: // read with the data
		case literal:
			e.ID = r.string()
		default:
			return nil, errCorrupt
		}
		switch r.byte() {
		case absent:
		case same:
			if turn == nil {
				return nil, errCorrupt
			}
			e.TurnID = turn
		case literal:
			s := r.string()
			e.TurnID = &s
		default:
			return nil, errCorrupt
		}
		switch r.byte() {
		case absent:
			thread = nil
		case same:
			if thread == nil {
				return nil, errCorrupt
			}
			e.ThreadID = thread
		case literal:
			s := r.string()
			thread = &s
			e.ThreadID = thread
		default:
			return nil, errCorrupt
		}
		nanos += r.varint()
		e.CreatedAt = time.Unix(0, nanos).UTC()
		if n := r.uvarint(uint64(len(r.b)) + 1); n > 0 {
			e.Data = json.RawMessage(r.bytes(int(n - 1)))
		}
		if idFrom == same {
			id, ok := leadingID(e.Data)
			if !ok {
				return nil, errCorrupt
			}
			e.ID = id
		}
		out = append(out, e)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(out) != count {
		return nil, fmt.Errorf("%w: %d events, header says %d", errCorrupt, len(out), count)
	}
	// The events share nothing mutable: each pointer is its own.
	for i := range out {
		out[i].TurnID = clonePtr(out[i].TurnID)
		out[i].ThreadID = clonePtr(out[i].ThreadID)
	}
	return out, nil
}

// idPrefix starts the data of every event about a row: the row's id.
const idPrefix = `{"id":"`

// idLeadsData reports whether data starts with id as its "id" field, so
// that the envelope's copy need not be stored. Only ids that JSON writes
// as they are qualify.
func idLeadsData(id string, data []byte) bool {
	if strings.ContainsAny(id, "\"\\<>&") || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if r < 0x20 || r == 0x2028 || r == 0x2029 {
			return false
		}
	}
	return len(data) > len(idPrefix)+len(id) && string(data[:len(idPrefix)]) == idPrefix &&
		string(data[len(idPrefix):len(idPrefix)+len(id)]) == id && data[len(idPrefix)+len(id)] == '"'
}

// leadingID reads back the id idLeadsData found.
func leadingID(data []byte) (string, bool) {
	if len(data) <= len(idPrefix) || string(data[:len(idPrefix)]) != idPrefix {
		return "", false
	}
	rest := data[len(idPrefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return "", false
	}
	return string(rest[:end]), true
}

func clonePtr(p *string) *string {
	if p == nil {
		return nil
	}
	s := *p
	return &s
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func appendOptString(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, 0)
	}
	return append(binary.AppendUvarint(dst, uint64(len(*s))+1), *s...)
}

// reader reads a payload; its first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() { r.err, r.b = errCorrupt, nil }

func (r *reader) uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.fail()
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) string() string {
	return string(r.bytes(int(r.uvarint(uint64(len(r.b))))))
}

func (r *reader) optString() *string {
	n := r.uvarint(uint64(len(r.b)) + 1)
	if n == 0 {
		return nil
	}
	s := string(r.bytes(int(n - 1)))
	return &s
}

// Sorted returns evs in seq order (a copy when they were not).
func Sorted(evs []forge.Event) []forge.Event {
	if slices.IsSortedFunc(evs, cmpSeq) {
		return evs
	}
	c := slices.Clone(evs)
	slices.SortStableFunc(c, cmpSeq)
	return c
}

func cmpSeq(a, b forge.Event) int {
	switch {
	case a.Seq < b.Seq:
		return -1
	case a.Seq > b.Seq:
		return 1
	}
	return 0
}

// maxWholeTurn bounds the rows a RefWholeTurn brings into a dictionary
// (roughly, in bytes of their content).
const maxWholeTurn = 64 << 10

// RefsFor chooses the refs of a body of evs: every row of rows an event
// names by its id (the turn of turn.*, the message of message.*, the part
// of model.message and tool.*), a part through its message when the body
// refers to that message anyway. Turns come first, then messages, then
// parts, each in the order the events first name them. When whole is set
// and every row named is turn whole or one of its messages or parts, and
// the turn is small, the one ref is the whole turn.
func RefsFor(evs []forge.Event, rows *Rows, whole string) []Ref {
	refs := refsFor(evs, rows)
	if whole == "" || rows.turns[whole] == nil || len(refs) == 0 {
		return refs
	}
	for _, r := range refs {
		switch r.Kind {
		case RefTurn:
			if r.ID != whole {
				return refs
			}
		case RefMessage, RefPart:
			id := r.ID
			if r.Kind == RefPart {
				id = r.Message
			}
			if m := rows.messages[id]; m == nil || m.TurnID != whole {
				return refs
			}
		}
	}
	size := 0
	for _, m := range rows.TurnMessages(whole) {
		for _, p := range m.Parts {
			size += 256 + len(p.Text) + len(p.Arguments) + len(p.Data)
			if p.Output != nil {
				size += len(*p.Output)
			}
			if p.Error != nil {
				size += len(*p.Error)
			}
		}
	}
	if size > maxWholeTurn {
		return refs
	}
	return []Ref{{Kind: RefWholeTurn, ID: whole}}
}

func refsFor(evs []forge.Event, rows *Rows) []Ref {
	parts := rows.partMsg
	var turns, msgs, prts []Ref
	seen := map[Ref]bool{}
	add := func(list *[]Ref, r Ref) {
		if !seen[r] {
			seen[r] = true
			*list = append(*list, r)
		}
	}
	for i := range evs {
		id := evs[i].ID
		switch {
		case rows.turns[id] != nil:
			add(&turns, Ref{Kind: RefTurn, ID: id})
		case rows.messages[id] != nil:
			add(&msgs, Ref{Kind: RefMessage, ID: id})
		case parts[id] != "":
			add(&prts, Ref{Kind: RefPart, Message: parts[id], ID: id})
		}
	}
	out := append(turns, msgs...)
	for _, p := range prts {
		if !seen[Ref{Kind: RefMessage, ID: p.Message}] {
			out = append(out, p)
		}
	}
	return out
}
