package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// A manifest on disk is text, one record a line, paths and link targets
// quoted as Go strings (so any name, newlines included, fits on a line):
//
//	forge-snapshot 1 <id> <seq> <flags: t truncated, p partial, - none> [<base id>]
//	d <mode> <path>                                         a directory
//	f <sha256> <size> <mode> <mtime> <ctime> <dev> <ino> <path>   a file
//	l <target> <path>                                       a symlink
//	s <path>                                                a file not kept
//	x <path>                                                (delta) a file of the base gone
//	X <path>                                                (delta) a directory of the base gone
//
// A manifest with a base id is a delta: the base (a whole manifest) with
// the lines that differ from it. A file unchanged since the base costs the
// delta nothing.
// It costs about a tenth of encoding/json plus gzip on a step's path (the
// manifest is written at every changing step), at about 130 bytes a file.
const manifestMagic = "forge-snapshot 1"

func encodeManifest(m *manifest) []byte {
	return encodeLines(m, nil)
}

// maxDeltaLines is how many lines, past a quarter of the files, a delta
// may have before a whole manifest is written instead (the new base).
const maxDeltaLines = 64

// encodeDelta encodes m as a delta against base (a whole manifest); false
// when it differs from it too much to be worth one.
func encodeDelta(m, base *manifest) ([]byte, bool) {
	n := 0
	for p, e := range m.Files {
		if be := base.Files[p]; be == nil || *be != *e {
			n++
		}
	}
	for p := range base.Files {
		if m.Files[p] == nil {
			n++
		}
	}
	if n > len(m.Files)/4+maxDeltaLines {
		return nil, false
	}
	return encodeLines(m, base), true
}

// encodeLines writes m whole (base nil) or as a delta against base.
func encodeLines(m, base *manifest) []byte {
	size := len(m.Files)*140 + len(m.Dirs)*40
	if base != nil {
		size = 4096
	}
	b := make([]byte, 0, 64+size)
	flags := ""
	if m.Truncated {
		flags += "t"
	}
	if m.Partial {
		flags += "p"
	}
	if flags == "" {
		flags = "-"
	}
	b = fmt.Appendf(b, "%s %s %d %s", manifestMagic, m.ID, m.Seq, flags)
	if base != nil {
		b = append(b, ' ')
		b = append(b, base.ID...)
	}
	b = append(b, '\n')
	line := func(kind, p string) {
		b = append(b, kind...)
		b = strconv.AppendQuote(b, p)
		b = append(b, '\n')
	}
	if base != nil {
		for _, p := range sortedKeys(base.Dirs) {
			if _, ok := m.Dirs[p]; !ok {
				line("X ", p)
			}
		}
		for _, p := range sortedKeys(base.Files) {
			if m.Files[p] == nil {
				line("x ", p)
			}
		}
	}
	for _, p := range sortedKeys(m.Dirs) {
		if base != nil {
			if v, ok := base.Dirs[p]; ok && v == m.Dirs[p] {
				continue
			}
		}
		b = append(b, "d "...)
		b = strconv.AppendUint(b, uint64(m.Dirs[p]), 8)
		b = append(b, ' ')
		b = strconv.AppendQuote(b, p)
		b = append(b, '\n')
	}
	for _, p := range sortedKeys(m.Files) {
		e := m.Files[p]
		if base != nil {
			if be := base.Files[p]; be != nil && *be == *e {
				continue
			}
		}
		if e.Link != "" {
			b = append(b, "l "...)
			b = strconv.AppendQuote(b, e.Link)
		} else {
			b = append(b, "f "...)
			b = append(b, e.Hash...)
			b = append(b, ' ')
			b = strconv.AppendInt(b, e.Size, 10)
			b = append(b, ' ')
			b = strconv.AppendUint(b, uint64(e.Mode), 8)
			for _, v := range e.Meta {
				b = append(b, ' ')
				b = strconv.AppendInt(b, v, 10)
			}
		}
		b = append(b, ' ')
		b = strconv.AppendQuote(b, p)
		b = append(b, '\n')
	}
	for _, p := range m.Skipped {
		line("s ", p)
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var errManifest = errors.New("malformed snapshot manifest")

func decodeManifest(data []byte) (*manifest, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	if !sc.Scan() {
		return nil, errManifest
	}
	head := strings.Fields(sc.Text())
	if (len(head) != 5 && len(head) != 6) || head[0]+" "+head[1] != manifestMagic {
		return nil, errManifest
	}
	seq, err := strconv.ParseInt(head[3], 10, 64)
	if err != nil {
		return nil, errManifest
	}
	m := &manifest{ID: head[2], Seq: seq, Files: map[string]*entry{}, Dirs: map[string]uint32{},
		Truncated: strings.Contains(head[4], "t"), Partial: strings.Contains(head[4], "p")}
	if len(head) == 6 {
		m.Base = head[5]
	}
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 3 || line[1] != ' ' {
			return nil, errManifest
		}
		kind, rest := line[0], line[2:]
		switch kind {
		case 'd':
			mode, rest, ok := strings.Cut(rest, " ")
			p, err := strconv.Unquote(rest)
			v, perr := strconv.ParseUint(mode, 8, 32)
			if !ok || err != nil || perr != nil {
				return nil, errManifest
			}
			m.Dirs[p] = uint32(v)
		case 'l':
			q, err := strconv.QuotedPrefix(rest)
			if err != nil || len(rest) < len(q)+2 {
				return nil, errManifest
			}
			target, _ := strconv.Unquote(q)
			p, err := strconv.Unquote(rest[len(q)+1:])
			if err != nil || target == "" {
				return nil, errManifest
			}
			m.Files[p] = &entry{Link: target}
		case 'f':
			fields := strings.SplitN(rest, " ", 8)
			if len(fields) != 8 || len(fields[0]) != 64 {
				return nil, errManifest
			}
			e := &entry{Hash: fields[0]}
			var nums [6]int64
			for i := range nums {
				base := 10
				if i == 1 {
					base = 8
				}
				if nums[i], err = strconv.ParseInt(fields[i+1], base, 64); err != nil {
					return nil, errManifest
				}
			}
			e.Size, e.Mode = nums[0], uint32(nums[1])
			e.Meta = [4]int64{nums[2], nums[3], nums[4], nums[5]}
			p, err := strconv.Unquote(fields[7])
			if err != nil {
				return nil, errManifest
			}
			m.Files[p] = e
		case 's', 'x', 'X':
			p, err := strconv.Unquote(rest)
			if err != nil || (kind != 's' && m.Base == "") {
				return nil, errManifest
			}
			switch kind {
			case 's':
				m.Skipped = append(m.Skipped, p)
			case 'x':
				m.goneFiles = append(m.goneFiles, p)
			default:
				m.goneDirs = append(m.goneDirs, p)
			}
		default:
			return nil, errManifest
		}
	}
	if err := sc.Err(); err != nil {
		return nil, errManifest
	}
	return m, nil
}

// manifestHashes returns the blob hashes of a manifest's files (one per
// file line) without decoding the rest: what pruning a snapshot needs.
func manifestHashes(data []byte) []string {
	var out []string
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) > 66 && line[0] == 'f' && line[1] == ' ' && line[66] == ' ' {
			out = append(out, string(line[2:66]))
		}
	}
	return out
}

// applyDelta resolves a delta (as decoded) against its base: the manifest
// it stands for, whole.
func applyDelta(d, base *manifest) *manifest {
	m := &manifest{ID: d.ID, Seq: d.Seq, Skipped: d.Skipped, Truncated: d.Truncated, Partial: d.Partial, Base: d.Base,
		Files: make(map[string]*entry, len(base.Files)+len(d.Files)), Dirs: make(map[string]uint32, len(base.Dirs)+len(d.Dirs))}
	for p, e := range base.Files {
		m.Files[p] = e
	}
	for p, v := range base.Dirs {
		m.Dirs[p] = v
	}
	for _, p := range d.goneFiles {
		delete(m.Files, p)
	}
	for _, p := range d.goneDirs {
		delete(m.Dirs, p)
	}
	for p, e := range d.Files {
		m.Files[p] = e
	}
	for p, v := range d.Dirs {
		m.Dirs[p] = v
	}
	return m
}
