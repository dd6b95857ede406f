package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
)

// toolNames are the names of the tools Tools returns, in that order.
var toolNames = []string{"bash", "read_file", "write_file", "edit_file", "list_files", "grep"}

// Tools returns the sandbox's built-in tools: bash, read_file, write_file,
// edit_file, list_files and grep.
func (s *Sandbox) Tools() []forge.Tool {
	return []forge.Tool{
		bashTool{s}, readTool{s}, writeTool{s}, editTool{s}, listTool{s}, grepTool{s},
	}
}

// decode unmarshals args strictly (unknown fields are refused).
func decode(name string, args json.RawMessage, v any, usage string) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: bad arguments (%v); expected %s", name, err, usage)
	}
	return nil
}

func toolErr(name, path string, err error) error {
	if path == "" {
		return fmt.Errorf("%s: %w", name, err)
	}
	return fmt.Errorf("%s %s: %w", name, path, err)
}

// limitText cuts s to max bytes (on a rune boundary) with a marker.
func limitText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[output truncated: %d bytes omitted]", len(s)-cut)
}

// ---- bash

type bashTool struct{ s *Sandbox }

func (t bashTool) Def() forge.ToolDef {
	desc := fmt.Sprintf("Runs a command with bash -c in the session's working directory and returns its combined stdout and stderr "+
		"(at most %d bytes; longer output keeps its head and tail). The command is killed after timeout_ms (default %d, at most %d). "+
		"Processes started in the background end with the command.",
		t.s.m.opts.MaxOutput, t.s.m.opts.CommandTimeout.Milliseconds(), t.s.m.opts.MaxCommandTimeout.Milliseconds())
	if !t.s.m.CommandsAllowed() {
		desc = "Disabled on this server (commands cannot be isolated here): every call fails. Use the file tools instead."
	}
	return forge.ToolDef{
		Name:        "bash",
		Description: desc,
		InputSchema: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{`+
			`"command":{"type":"string","description":"The bash command line."},`+
			`"timeout_ms":{"type":"integer","minimum":1,"maximum":%d,"description":"Timeout in milliseconds."}},`+
			`"required":["command"],"additionalProperties":false}`, t.s.m.opts.MaxCommandTimeout.Milliseconds())),
	}
}

func (t bashTool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Command   *string `json:"command"`
		TimeoutMS *int64  `json:"timeout_ms"`
	}
	const usage = `{"command": "...", "timeout_ms": optional}`
	if err := decode("bash", args, &in, usage); err != nil {
		return forge.ToolResult{}, err
	}
	if in.Command == nil || strings.TrimSpace(*in.Command) == "" {
		return forge.ToolResult{}, fmt.Errorf("bash: command is required; expected %s", usage)
	}
	var timeout time.Duration
	if in.TimeoutMS != nil {
		if *in.TimeoutMS <= 0 || *in.TimeoutMS > t.s.m.opts.MaxCommandTimeout.Milliseconds() {
			return forge.ToolResult{}, fmt.Errorf("bash: timeout_ms must be 1..%d", t.s.m.opts.MaxCommandTimeout.Milliseconds())
		}
		timeout = time.Duration(*in.TimeoutMS) * time.Millisecond
	}
	res, err := t.s.Run(ctx, *in.Command, timeout)
	if err != nil {
		return forge.ToolResult{}, toolErr("bash", "", err)
	}
	return bashResult(res, timeout, t.s.m.opts.CommandTimeout, t.s.m.opts.WorkspaceQuota)
}

func bashResult(res *RunResult, timeout, def time.Duration, quotaBytes int64) (forge.ToolResult, error) {
	if timeout <= 0 {
		timeout = def
	}
	var b strings.Builder
	b.WriteString(res.Output)
	note := func(format string, a ...any) {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, format, a...)
	}
	if res.OutputID != "" {
		note("[full output: %d bytes, saved as %s]\n", res.TotalBytes, res.OutputID)
	}
	if res.LimitMessage != "" {
		note("[%s]\n", res.LimitMessage)
	}
	quota := FormatBytes(quotaBytes)
	switch {
	case res.OverQuota && !res.QuotaKilled:
		note("[workspace quota exceeded: work/ and home/ use %s of %s; until files are deleted (rm), write_file and edit_file are refused "+
			"and commands run with file writes disabled]\n", FormatBytes(res.WorkspaceBytes), quota)
	case res.WritesDisabled && res.WorkspaceBytes >= 0:
		note("[the workspace is back under its quota (%s of %s): file writes work again]\n", FormatBytes(res.WorkspaceBytes), quota)
	}
	switch {
	case res.QuotaKilled:
		return forge.ToolResult{Output: b.String(), IsError: true}, nil
	case res.TimedOut:
		note("[command timed out after %s and was killed]", timeout)
		return forge.ToolResult{Output: b.String(), IsError: true}, nil
	case res.Stopped:
		note("[command killed: sandbox stopped]")
		return forge.ToolResult{Output: b.String(), IsError: true}, nil
	case res.Canceled:
		return forge.ToolResult{}, fmt.Errorf("bash: command canceled")
	case res.ExitCode != 0:
		note("[exit code %d]", res.ExitCode)
		return forge.ToolResult{Output: b.String(), IsError: true}, nil
	case res.OverQuota:
		return forge.ToolResult{Output: b.String(), IsError: true}, nil
	}
	if b.Len() == 0 {
		b.WriteString("[no output]")
	}
	return forge.ToolResult{Output: b.String()}, nil
}

// ---- read_file

type readTool struct{ s *Sandbox }

func (readTool) Def() forge.ToolDef {
	return forge.ToolDef{
		Name:        "read_file",
		Description: "Reads a text file of the working directory. offset (1-based line) and limit (lines) select a part of it.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"Path relative to the working directory."},` +
			`"offset":{"type":"integer","minimum":1,"description":"First line to return (1-based)."},` +
			`"limit":{"type":"integer","minimum":1,"description":"Number of lines to return."}},` +
			`"required":["path"],"additionalProperties":false}`),
	}
}

func (t readTool) Call(_ context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Path   string `json:"path"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	const usage = `{"path": "...", "offset": optional line, "limit": optional lines}`
	if err := decode("read_file", args, &in, usage); err != nil {
		return forge.ToolResult{}, err
	}
	if in.Path == "" || in.Offset < 0 || in.Limit < 0 {
		return forge.ToolResult{}, fmt.Errorf("read_file: expected %s", usage)
	}
	p, err := t.s.Resolve(in.Path)
	if err != nil {
		return forge.ToolResult{}, toolErr("read_file", "", err)
	}
	f, err := t.s.openInside(p, os.O_RDONLY, 0)
	if err != nil {
		return forge.ToolResult{}, toolErr("read_file", in.Path, err)
	}
	defer f.Close()
	max := t.s.m.opts.MaxOutput
	if in.Offset == 0 && in.Limit == 0 {
		data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
		if err != nil {
			return forge.ToolResult{}, toolErr("read_file", in.Path, err)
		}
		if isBinary(data) {
			fi, _ := f.Stat()
			return forge.ToolResult{}, fmt.Errorf("read_file %s: binary file (%d bytes)", in.Path, fi.Size())
		}
		if len(data) > max {
			fi, _ := f.Stat()
			cut := max
			for cut > 0 && !utf8.RuneStart(data[cut]) {
				cut--
			}
			return forge.ToolResult{Output: string(data[:cut]) +
				fmt.Sprintf("\n[output truncated: %d bytes omitted; use offset and limit to read further]", fi.Size()-int64(cut))}, nil
		}
		return forge.ToolResult{Output: string(data)}, nil
	}
	first := max1(in.Offset)
	sc := bufio.NewReader(f)
	var b strings.Builder
	n := 0
	for line := 1; ; line++ {
		text, err := sc.ReadString('\n')
		if line >= first && text != "" {
			if strings.IndexByte(text, 0) >= 0 {
				return forge.ToolResult{}, fmt.Errorf("read_file %s: binary file", in.Path)
			}
			b.WriteString(text)
			n++
			if (in.Limit > 0 && n >= in.Limit) || b.Len() > max {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if n == 0 {
		return forge.ToolResult{Output: fmt.Sprintf("[no lines at offset %d]", first)}, nil
	}
	return forge.ToolResult{Output: limitText(b.String(), max)}, nil
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

func isBinary(data []byte) bool {
	if len(data) > 8000 {
		data = data[:8000]
	}
	return bytes.IndexByte(data, 0) >= 0
}

// ---- write_file

type writeTool struct{ s *Sandbox }

func (writeTool) Def() forge.ToolDef {
	return forge.ToolDef{
		Name:        "write_file",
		Description: "Writes content to a file of the working directory, creating it and its parent directories or replacing it.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"Path relative to the working directory."},` +
			`"content":{"type":"string","description":"The complete new content."}},` +
			`"required":["path","content"],"additionalProperties":false}`),
	}
}

func (t writeTool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	const usage = `{"path": "...", "content": "..."}`
	if err := decode("write_file", args, &in, usage); err != nil {
		return forge.ToolResult{}, err
	}
	if in.Path == "" || in.Content == nil {
		return forge.ToolResult{}, fmt.Errorf("write_file: expected %s", usage)
	}
	p, err := t.s.Resolve(in.Path)
	if err != nil {
		return forge.ToolResult{}, toolErr("write_file", "", err)
	}
	if p == t.s.dir {
		return forge.ToolResult{}, fmt.Errorf("write_file %s: is a directory", in.Path)
	}
	if err := t.s.mkdirInside(filepath.Dir(p)); err != nil {
		return forge.ToolResult{}, toolErr("write_file", in.Path, err)
	}
	// The parent may have been created just now: check again that it is
	// still inside (a racing symlink swap would show here).
	if again, err := t.s.Resolve(p); err != nil || again != p {
		return forge.ToolResult{}, fmt.Errorf("write_file %s: path changed while writing: refused", in.Path)
	}
	old, statErr := os.Lstat(p)
	existed := statErr == nil
	delta := int64(len(*in.Content))
	if existed && old.Mode().IsRegular() {
		delta -= old.Size()
	}
	if err := t.s.reserveWrite(ctx, "write_file", delta); err != nil {
		return forge.ToolResult{}, err
	}
	f, err := t.s.openInside(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return forge.ToolResult{}, toolErr("write_file", in.Path, err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return forge.ToolResult{}, toolErr("write_file", in.Path, err)
	}
	if _, err := f.WriteString(*in.Content); err != nil {
		return forge.ToolResult{}, toolErr("write_file", in.Path, err)
	}
	if err := f.Close(); err != nil {
		return forge.ToolResult{}, toolErr("write_file", in.Path, err)
	}
	verb := "created"
	if existed {
		verb = "overwrote"
	}
	return forge.ToolResult{Output: fmt.Sprintf("%s %s (%d bytes, %d lines)", verb, t.s.rel(p), len(*in.Content), countLines([]byte(*in.Content)))}, nil
}

// ---- edit_file

type editTool struct{ s *Sandbox }

func (editTool) Def() forge.ToolDef {
	return forge.ToolDef{
		Name: "edit_file",
		Description: "Replaces old_string with new_string in a file of the working directory. old_string must match exactly " +
			"(whitespace included) and occur exactly once, unless replace_all is true.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"Path relative to the working directory."},` +
			`"old_string":{"type":"string","description":"Exact text to replace."},` +
			`"new_string":{"type":"string","description":"Replacement text."},` +
			`"replace_all":{"type":"boolean","description":"Replace every occurrence."}},` +
			`"required":["path","old_string","new_string"],"additionalProperties":false}`),
	}
}

func (t editTool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Path       string  `json:"path"`
		Old        *string `json:"old_string"`
		New        *string `json:"new_string"`
		ReplaceAll bool    `json:"replace_all"`
	}
	const usage = `{"path": "...", "old_string": "...", "new_string": "...", "replace_all": optional bool}`
	if err := decode("edit_file", args, &in, usage); err != nil {
		return forge.ToolResult{}, err
	}
	if in.Path == "" || in.Old == nil || in.New == nil {
		return forge.ToolResult{}, fmt.Errorf("edit_file: expected %s", usage)
	}
	if *in.Old == "" {
		return forge.ToolResult{}, errors.New("edit_file: old_string is empty (use write_file to create a file)")
	}
	if *in.Old == *in.New {
		return forge.ToolResult{}, errors.New("edit_file: old_string and new_string are the same")
	}
	p, err := t.s.Resolve(in.Path)
	if err != nil {
		return forge.ToolResult{}, toolErr("edit_file", "", err)
	}
	f, err := t.s.openInside(p, os.O_RDWR, 0)
	if err != nil {
		return forge.ToolResult{}, toolErr("edit_file", in.Path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return forge.ToolResult{}, toolErr("edit_file", in.Path, err)
	}
	content := string(data)
	n := strings.Count(content, *in.Old)
	switch {
	case n == 0:
		return forge.ToolResult{}, fmt.Errorf("edit_file %s: old_string not found (it must match exactly, whitespace included)", in.Path)
	case n > 1 && !in.ReplaceAll:
		return forge.ToolResult{}, fmt.Errorf("edit_file %s: old_string occurs %d times; add surrounding context to make it unique, or set replace_all", in.Path, n)
	}
	var out string
	if in.ReplaceAll {
		out = strings.ReplaceAll(content, *in.Old, *in.New)
	} else {
		out = strings.Replace(content, *in.Old, *in.New, 1)
	}
	if err := t.s.reserveWrite(ctx, "edit_file", int64(len(out)-len(data))); err != nil {
		return forge.ToolResult{}, err
	}
	if err := f.Truncate(0); err != nil {
		return forge.ToolResult{}, toolErr("edit_file", in.Path, err)
	}
	if _, err := f.WriteAt([]byte(out), 0); err != nil {
		return forge.ToolResult{}, toolErr("edit_file", in.Path, err)
	}
	if err := f.Close(); err != nil {
		return forge.ToolResult{}, toolErr("edit_file", in.Path, err)
	}
	return forge.ToolResult{Output: fmt.Sprintf("edited %s: %d replacement(s)", t.s.rel(p), n)}, nil
}

// ---- list_files

type listTool struct{ s *Sandbox }

const listMax = 2000

func (listTool) Def() forge.ToolDef {
	return forge.ToolDef{
		Name: "list_files",
		Description: fmt.Sprintf("Lists files under a directory of the working directory (default: all of it), recursively, "+
			"directories with a trailing /. pattern filters file names (a glob such as *.go). .git contents are skipped. At most %d entries.", listMax),
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"path":{"type":"string","description":"Directory relative to the working directory (default .)."},` +
			`"pattern":{"type":"string","description":"Glob matched against file names, e.g. *.go."},` +
			`"max_depth":{"type":"integer","minimum":1,"description":"Depth limit (1 = the directory's own entries)."}},` +
			`"additionalProperties":false}`),
	}
}

func (t listTool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Path     string `json:"path"`
		Pattern  string `json:"pattern"`
		MaxDepth int    `json:"max_depth"`
	}
	const usage = `{"path": optional dir, "pattern": optional glob, "max_depth": optional}`
	if err := decode("list_files", args, &in, usage); err != nil {
		return forge.ToolResult{}, err
	}
	if in.Path == "" {
		in.Path = "."
	}
	if in.Pattern != "" {
		if _, err := filepath.Match(in.Pattern, "x"); err != nil {
			return forge.ToolResult{}, fmt.Errorf("list_files: bad pattern %q: %v", in.Pattern, err)
		}
	}
	root, err := t.s.Resolve(in.Path)
	if err != nil {
		return forge.ToolResult{}, toolErr("list_files", "", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return forge.ToolResult{}, toolErr("list_files", in.Path, unwrapPathErr(err))
	}
	if !fi.IsDir() {
		return forge.ToolResult{}, fmt.Errorf("list_files %s: not a directory", in.Path)
	}
	var entries []string
	more := false
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil || p == root {
			return nil
		}
		r, _ := filepath.Rel(root, p)
		depth := strings.Count(r, string(filepath.Separator)) + 1
		if d.IsDir() && (d.Name() == ".git" || (in.MaxDepth > 0 && depth >= in.MaxDepth)) {
			if in.Pattern == "" {
				entries = append(entries, t.s.rel(p)+"/")
			}
			return filepath.SkipDir
		}
		if in.Pattern != "" {
			if ok, _ := filepath.Match(in.Pattern, d.Name()); !ok || d.IsDir() {
				return nil
			}
		}
		if len(entries) >= listMax {
			more = true
			return filepath.SkipAll
		}
		e := t.s.rel(p)
		switch {
		case d.IsDir():
			e += "/"
		case d.Type()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				e += " -> " + target
			}
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return forge.ToolResult{}, toolErr("list_files", in.Path, err)
	}
	sort.Strings(entries)
	if len(entries) == 0 {
		return forge.ToolResult{Output: "[no files]"}, nil
	}
	out := strings.Join(entries, "\n")
	if more {
		out += fmt.Sprintf("\n[listing stopped at %d entries]", listMax)
	}
	return forge.ToolResult{Output: limitText(out, t.s.m.opts.MaxOutput)}, nil
}

// ---- grep

type grepTool struct{ s *Sandbox }

const (
	grepDefaultMax = 200
	grepMaxFile    = 10 << 20
	grepMaxLine    = 500
)

func (grepTool) Def() forge.ToolDef {
	return forge.ToolDef{
		Name: "grep",
		Description: "Searches files of the working directory for a regular expression (RE2 syntax) and returns matching lines as path:line:text. " +
			"path is a file or directory (default .), glob filters file names, .git and binary files are skipped.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"pattern":{"type":"string","description":"Regular expression (RE2)."},` +
			`"path":{"type":"string","description":"File or directory relative to the working directory (default .)."},` +
			`"glob":{"type":"string","description":"Glob matched against file names, e.g. *.go."},` +
			`"ignore_case":{"type":"boolean"},` +
			`"max_results":{"type":"integer","minimum":1,"maximum":5000,"description":"Default 200."}},` +
			`"required":["pattern"],"additionalProperties":false}`),
	}
}

func (t grepTool) Call(ctx context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Pattern    *string `json:"pattern"`
		Path       string  `json:"path"`
		Glob       string  `json:"glob"`
		IgnoreCase bool    `json:"ignore_case"`
		MaxResults int     `json:"max_results"`
	}
	const usage = `{"pattern": "regexp", "path": optional, "glob": optional, "ignore_case": optional, "max_results": optional}`
	if err := decode("grep", args, &in, usage); err != nil {
		return forge.ToolResult{}, err
	}
	if in.Pattern == nil || *in.Pattern == "" {
		return forge.ToolResult{}, fmt.Errorf("grep: pattern is required; expected %s", usage)
	}
	if in.MaxResults < 0 || in.MaxResults > 5000 {
		return forge.ToolResult{}, errors.New("grep: max_results must be 1..5000")
	}
	if in.MaxResults == 0 {
		in.MaxResults = grepDefaultMax
	}
	expr := *in.Pattern
	if in.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return forge.ToolResult{}, fmt.Errorf("grep: bad pattern: %v", err)
	}
	if in.Glob != "" {
		if _, err := filepath.Match(in.Glob, "x"); err != nil {
			return forge.ToolResult{}, fmt.Errorf("grep: bad glob %q: %v", in.Glob, err)
		}
	}
	if in.Path == "" {
		in.Path = "."
	}
	root, err := t.s.Resolve(in.Path)
	if err != nil {
		return forge.ToolResult{}, toolErr("grep", "", err)
	}
	if _, err := os.Lstat(root); err != nil {
		return forge.ToolResult{}, toolErr("grep", in.Path, unwrapPathErr(err))
	}
	var out strings.Builder
	matches := 0
	more := false
	search := func(p string) error {
		f, err := t.s.openInside(p, os.O_RDONLY, 0)
		if err != nil {
			return nil
		}
		defer f.Close()
		if fi, err := f.Stat(); err != nil || fi.Size() > grepMaxFile {
			return nil
		}
		data, err := io.ReadAll(f)
		if err != nil || isBinary(data) {
			return nil
		}
		rel := t.s.rel(p)
		for i, line := range bytes.Split(data, []byte("\n")) {
			if !re.Match(line) {
				continue
			}
			if matches >= in.MaxResults {
				more = true
				return filepath.SkipAll
			}
			matches++
			l := string(bytes.TrimRight(line, "\r"))
			if len(l) > grepMaxLine {
				l = limitText(l, grepMaxLine)
			}
			fmt.Fprintf(&out, "%s:%d:%s\n", rel, i+1, l)
		}
		return nil
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if in.Glob != "" && p != root {
			if ok, _ := filepath.Match(in.Glob, d.Name()); !ok {
				return nil
			}
		}
		return search(p)
	})
	if err != nil {
		return forge.ToolResult{}, toolErr("grep", in.Path, err)
	}
	if matches == 0 {
		return forge.ToolResult{Output: "[no matches]"}, nil
	}
	s := strings.TrimSuffix(out.String(), "\n")
	if more {
		s += fmt.Sprintf("\n[stopped at %d matches]", in.MaxResults)
	}
	return forge.ToolResult{Output: limitText(s, t.s.m.opts.MaxOutput)}, nil
}
