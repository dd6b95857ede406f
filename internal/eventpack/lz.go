package eventpack

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"sync"
)

// An LZ77 coder with a preset dictionary, for inputs of a few kilobytes
// that repeat long runs of the dictionary: the events of a turn against
// the rows they announce. compress/flate takes a dictionary too, but each
// of its writers allocates hundreds of kilobytes and cannot change its
// dictionary on Reset; this one keeps its tables in a pool.
//
// The stream is a sequence of (literal run, match) pairs:
//
//	uvarint literals, the literal bytes,
//	then, unless the output is complete: uvarint length-minMatch, uvarint distance
//
// A distance counts back from the current position in dict ++ output, so
// a match may start in the dictionary, in what was decoded so far, or
// overlap the bytes it produces.

const (
	minMatch = 4
	hashBits = 13
	// maxChain bounds the candidates tried per position: enough for the
	// handful of copies of each id and timestamp a turn repeats.
	maxChain = 16
	// goodMatch ends the search for a longer match.
	goodMatch = 256
	// Inside a match longer than maxInsert only its last positions join
	// the hash chains: what follows it is found through them, and the
	// rest of its bytes through the copy it matched.
	maxInsert = 32
)

// errCorrupt answers a stream that does not decode.
var errCorrupt = errors.New("eventpack: corrupt body")

// matcher finds matches in dict ++ src. Its hash table is not cleared
// between uses: positions are offset by base, which grows with each use,
// and an entry below base is empty.
type matcher struct {
	head [1 << hashBits]int32
	prev []int32 // prev[i]: the previous position with i's hash (offset by base)
	win  []byte  // dict ++ src
	base int32
}

var matchers = sync.Pool{New: func() any { return new(matcher) }}

func hash4(b []byte) uint32 {
	return (binary.LittleEndian.Uint32(b) * 2654435761) >> (32 - hashBits)
}

func (m *matcher) insert(i int) {
	h := hash4(m.win[i:])
	m.prev[i] = m.head[h]
	m.head[h] = m.base + int32(i)
}

// longest returns the longest earlier match for position i (length 0 when
// there is none of minMatch bytes).
func (m *matcher) longest(i int) (length, dist int) {
	w := m.win
	limit := len(w) - i
	cand := m.head[hash4(w[i:])] - m.base
	for depth := 0; cand >= 0 && depth < maxChain; depth++ {
		c := int(cand)
		if w[c+length] == w[i+length] {
			n := matchLen(w[c:], w[i:i+limit])
			if n > length {
				length, dist = n, i-c
				if n == limit || n >= goodMatch {
					break
				}
			}
		}
		cand = m.prev[c] - m.base
	}
	if length < minMatch {
		return 0, 0
	}
	return length, dist
}

// matchLen is the length of the common prefix of a and b (b no longer
// than a: b starts later in the same window).
func matchLen(a, b []byte) int {
	n := 0
	for len(b)-n >= 8 {
		x := binary.LittleEndian.Uint64(a[n:]) ^ binary.LittleEndian.Uint64(b[n:])
		if x != 0 {
			return n + bits.TrailingZeros64(x)/8
		}
		n += 8
	}
	for n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// compress appends the encoding of src against dict to dst.
func compress(dst, src, dict []byte) []byte {
	m := matchers.Get().(*matcher)
	defer func() {
		m.win = m.win[:0]
		matchers.Put(m)
	}()
	m.win = append(append(m.win[:0], dict...), src...)
	if int64(m.base)+int64(len(m.win))+1 >= math.MaxInt32 || m.base == 0 {
		for i := range m.head {
			m.head[i] = -1
		}
		m.base = 0
	}
	if cap(m.prev) < len(m.win) {
		m.prev = make([]int32, len(m.win))
	}
	m.prev = m.prev[:len(m.win)]
	defer func() { m.base += int32(len(m.win)) + 1 }()
	end := len(m.win)
	last := end - minMatch // the last position a match can start at
	for i := 0; i < len(dict) && i <= last; i++ {
		m.insert(i)
	}
	lit := len(dict)
	i := lit
	for i <= last {
		length, dist := m.longest(i)
		if length == 0 {
			m.insert(i)
			i++
			continue
		}
		m.insert(i)
		// One step of lazy matching: a longer match at the next byte
		// is worth a literal.
		if i+1 <= last && length < goodMatch {
			if l2, d2 := m.longest(i + 1); l2 > length+1 {
				i++
				m.insert(i)
				length, dist = l2, d2
			}
		}
		dst = binary.AppendUvarint(dst, uint64(i-lit))
		dst = append(dst, m.win[lit:i]...)
		dst = binary.AppendUvarint(dst, uint64(length-minMatch))
		dst = binary.AppendUvarint(dst, uint64(dist))
		k := i + 1
		if length > maxInsert {
			k = i + length - 3
		}
		for ; k < i+length && k <= last; k++ {
			m.insert(k)
		}
		i += length
		lit = i
	}
	if lit < end {
		dst = binary.AppendUvarint(dst, uint64(end-lit))
		dst = append(dst, m.win[lit:end]...)
	}
	return dst
}

// decompress appends to dst the n bytes src encodes against dict.
func decompress(dst, src, dict []byte, n int) ([]byte, error) {
	start := len(dst)
	if cap(dst)-start < n {
		grown := make([]byte, start, start+n)
		copy(grown, dst)
		dst = grown
	}
	out := func() int { return len(dst) - start }
	for out() < n {
		lits, k := binary.Uvarint(src)
		if k <= 0 || lits > uint64(n-out()) || lits > uint64(len(src)-k) {
			return nil, errCorrupt
		}
		src = src[k:]
		dst = append(dst, src[:lits]...)
		src = src[lits:]
		if out() == n {
			break
		}
		ml, k := binary.Uvarint(src)
		if k <= 0 {
			return nil, errCorrupt
		}
		src = src[k:]
		dist, k := binary.Uvarint(src)
		if k <= 0 {
			return nil, errCorrupt
		}
		src = src[k:]
		length := ml + minMatch
		if ml > uint64(n) || length > uint64(n-out()) || dist == 0 || dist > uint64(len(dict)+out()) {
			return nil, errCorrupt
		}
		from := len(dict) + out() - int(dist) // in dict ++ output
		for n := int(length); n > 0; {
			var chunk []byte
			if from < len(dict) {
				chunk = dict[from:min(len(dict), from+n)]
			} else {
				p := start + from - len(dict)
				// An overlapping match repeats what it has copied so far.
				chunk = dst[p:min(len(dst), p+n)]
			}
			dst = append(dst, chunk...)
			from += len(chunk)
			n -= len(chunk)
		}
	}
	if len(src) != 0 {
		return nil, errCorrupt
	}
	return dst, nil
}
