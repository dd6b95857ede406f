package forge

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// Id prefixes, one per record type (API.md).
const (
	PrefixAgent       = "ag_"
	PrefixSession     = "ses_"
	PrefixTurn        = "turn_"
	PrefixThread      = "thr_"
	PrefixMessage     = "msg_"
	PrefixPart        = "prt_"
	PrefixCall        = "call_"
	PrefixParticipant = "par_"
	PrefixKey         = "key_"
	PrefixFile        = "file_"
	PrefixSchedule    = "sch_"
	PrefixScheduleRun = "run_"
	PrefixSnapshot    = "snap_"
)

// IDGen makes opaque, time-sortable ids with a type prefix.
type IDGen interface {
	New(prefix string) string
}

// crockford is Crockford's base32 alphabet: sortable as ASCII.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ULIDGen generates ULID-shaped ids (48-bit millisecond time, 80-bit
// randomness), monotonic within one generator so ids made in the same
// millisecond still sort in creation order.
type ULIDGen struct {
	Clock Clock

	mu     sync.Mutex // guards the following
	lastMs uint64
	hi     uint16 // high 16 bits of the 80-bit random part
	lo     uint64 // low 64 bits
}

// NewULIDGen returns a generator reading time from clock (SystemClock if nil).
func NewULIDGen(clock Clock) *ULIDGen {
	if clock == nil {
		clock = SystemClock{}
	}
	return &ULIDGen{Clock: clock}
}

// New returns prefix followed by a 26-character ULID.
func (g *ULIDGen) New(prefix string) string {
	ms := uint64(g.Clock.Now().UnixMilli())
	g.mu.Lock()
	if ms <= g.lastMs {
		ms = g.lastMs
		g.lo++
		if g.lo == 0 {
			g.hi++
		}
	} else {
		var b [10]byte
		_, _ = rand.Read(b[:])
		g.hi = binary.BigEndian.Uint16(b[:2]) & 0x7fff // leave room to increment
		g.lo = binary.BigEndian.Uint64(b[2:])
		g.lastMs = ms
	}
	hi, lo := g.hi, g.lo
	g.mu.Unlock()

	var raw [16]byte
	raw[0] = byte(ms >> 40)
	raw[1] = byte(ms >> 32)
	raw[2] = byte(ms >> 24)
	raw[3] = byte(ms >> 16)
	raw[4] = byte(ms >> 8)
	raw[5] = byte(ms)
	binary.BigEndian.PutUint16(raw[6:8], hi)
	binary.BigEndian.PutUint64(raw[8:], lo)
	return prefix + encodeULID(raw)
}

func encodeULID(id [16]byte) string {
	var dst [26]byte
	// 128 bits as 26 base32 digits, most significant first (2 leading bits are 0).
	hi := binary.BigEndian.Uint64(id[:8])
	lo := binary.BigEndian.Uint64(id[8:])
	for i := 25; i >= 0; i-- {
		dst[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(dst[:])
}

// Time returns the timestamp encoded in an id made by ULIDGen, or the zero
// time when id has no recognizable ULID.
func IDTime(id string) time.Time {
	if len(id) < 26 {
		return time.Time{}
	}
	s := id[len(id)-26:]
	var ms uint64
	for i := 0; i < 10; i++ {
		c := s[i]
		v := -1
		for j := 0; j < 32; j++ {
			if crockford[j] == c {
				v = j
				break
			}
		}
		if v < 0 {
			return time.Time{}
		}
		ms = ms<<5 | uint64(v)
	}
	return time.UnixMilli(int64(ms)).UTC()
}
