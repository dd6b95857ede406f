package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// serverFlags are the flags of the commands that talk to a running server.
type serverFlags struct {
	server string
	apiKey string
}

func (s *serverFlags) register(f *pflag.FlagSet) {
	server := os.Getenv("FORGE_URL")
	if server == "" {
		server = "http://127.0.0.1:8080"
	}
	f.StringVar(&s.server, "server", server, "URL of the Forge server (env FORGE_URL)")
	f.StringVar(&s.apiKey, "api-key", os.Getenv("FORGE_API_KEY"), "API key (env FORGE_API_KEY)")
}

func (s *serverFlags) client(agent string) (*client.Client, error) {
	return client.New(s.server, client.WithAPIKey(s.apiKey), client.WithUserAgent(agent+"/"+version()))
}

// pageSize is the page the list commands ask for (the API's maximum is 10000).
const pageSize = 1000

func newSessionsCommand() *cobra.Command {
	var (
		sf     serverFlags
		limit  int
		asJSON bool
		filter client.ListSessionsOptions
		meta   []string
	)
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List the sessions of a running Forge server, most recent first",
		Long: `List the sessions of a running Forge server, most recently updated first:
id, agent, kind, last update, token usage and title. forge show SESSION
prints one session's turns and messages.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := sf.client("forge-sessions")
			if err != nil {
				return err
			}
			for _, kv := range meta {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--metadata %q: want KEY=VALUE", kv)
				}
				if filter.Metadata == nil {
					filter.Metadata = map[string]string{}
				}
				filter.Metadata[k] = v
			}
			if err := listSessions(cmd.Context(), c, cmd.OutOrStdout(), filter, limit, asJSON); err != nil {
				return errors.New(describe(err, c))
			}
			return nil
		},
	}
	sf.register(cmd.Flags())
	cmd.Flags().IntVar(&limit, "limit", 20, "how many sessions to list (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sessions as a JSON array")
	cmd.Flags().StringVar(&filter.Agent, "agent", "", "only the sessions of this agent")
	cmd.Flags().StringVar(&filter.Kind, "kind", "", "only sessions of this kind: direct, forum or monologue")
	cmd.Flags().StringVar(&filter.Status, "status", "", "only running sessions (a turn runs) or idle ones")
	cmd.Flags().StringArrayVar(&meta, "metadata", nil, "only sessions whose metadata has KEY=VALUE (repeatable)")
	return cmd
}

// listSessions prints the sessions filter selects, as the server orders
// them (most recent update first).
func listSessions(ctx context.Context, c *client.Client, out io.Writer, filter client.ListSessionsOptions, limit int, asJSON bool) error {
	var all []forge.Session
	for cursor := ""; ; {
		filter.ListOptions = client.ListOptions{Limit: pageSize, Cursor: cursor}
		page, err := c.ListSessions(ctx, filter)
		if err != nil {
			return err
		}
		all = append(all, page.Data...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	more := 0
	if limit > 0 && len(all) > limit {
		more = len(all) - limit
		all = all[:limit]
	}
	if asJSON {
		if all == nil {
			all = []forge.Session{}
		}
		return writeJSON(out, all)
	}
	if len(all) == 0 {
		_, err := fmt.Fprintln(out, "no sessions")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGENT\tKIND\tUPDATED\tUSAGE\tTITLE")
	for _, s := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", safe(s.ID, 60), safe(s.Agent, 40), safe(s.Kind, 20),
			when(s.UpdatedAt), usage(s.Usage), safe(s.Title, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more > 0 {
		fmt.Fprintf(out, "(%d older sessions not shown; --limit 0 lists all)\n", more)
	}
	return nil
}

// showOptions are the flags of forge show.
type showOptions struct {
	full   bool
	asJSON bool
}

func newShowCommand() *cobra.Command {
	var (
		sf serverFlags
		o  showOptions
	)
	cmd := &cobra.Command{
		Use:   "show SESSION",
		Short: "Show what happened in a session: its turns and messages",
		Long: `Show what happened in a session of a running Forge server: each turn
(status, usage, errors, the actions it waits for) followed by its messages
with their parts (text, reasoning, tool calls with their arguments and
results, file changes). Long tool arguments, outputs and reasoning are
shortened; --full prints everything. The same data is in the HTTP API:
GET /v1/sessions/SESSION/messages and /events.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := sf.client("forge-show")
			if err != nil {
				return err
			}
			if err := showSession(cmd.Context(), c, cmd.OutOrStdout(), args[0], o); err != nil {
				return errors.New(describe(err, c))
			}
			return nil
		},
	}
	sf.register(cmd.Flags())
	cmd.Flags().BoolVar(&o.full, "full", false, "print long texts, arguments and outputs whole")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the session, its turns and messages as JSON")
	return cmd
}

func showSession(ctx context.Context, c *client.Client, out io.Writer, id string, o showOptions) error {
	ses, err := c.GetSession(ctx, id)
	if err != nil {
		return err
	}
	var turns []forge.Turn
	for cursor := ""; ; {
		page, err := c.ListTurns(ctx, id, client.ListOptions{Limit: pageSize, Cursor: cursor})
		if err != nil {
			return err
		}
		turns = append(turns, page.Data...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	var msgs []forge.Message
	for cursor := ""; ; {
		page, err := c.ListMessages(ctx, id, client.ListMessagesOptions{ListOptions: client.ListOptions{Limit: pageSize, Cursor: cursor}})
		if err != nil {
			return err
		}
		msgs = append(msgs, page.Data...)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if o.asJSON {
		if turns == nil {
			turns = []forge.Turn{}
		}
		if msgs == nil {
			msgs = []forge.Message{}
		}
		return writeJSON(out, map[string]any{"session": ses, "turns": turns, "messages": msgs})
	}
	p := &printer{w: out, full: o.full, mainThread: ses.MainThreadID}
	p.session(ses, len(turns))
	byTurn := map[string][]forge.Message{}
	for _, m := range msgs {
		byTurn[m.TurnID] = append(byTurn[m.TurnID], m)
	}
	for i := range turns {
		t := &turns[i]
		p.turn(t, byTurn[t.ID])
		delete(byTurn, t.ID)
	}
	// Messages of turns the list did not return (none, normally).
	for _, m := range msgs {
		if _, ok := byTurn[m.TurnID]; ok {
			p.message(&m)
		}
	}
	return p.err
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Limits of what forge show prints without --full.
const (
	maxLineRunes   = 200 // one line of output
	maxArgRunes    = 300 // a tool call's arguments, on one line
	maxOutputLines = 8   // a tool's output or error
	maxThinkLines  = 6   // a reasoning part
	maxTextLines   = 60  // a text part
)

// printer writes a session as indented text; the first write error sticks.
type printer struct {
	w          io.Writer
	full       bool
	mainThread string
	err        error
}

func (p *printer) line(indent int, format string, args ...any) {
	if p.err != nil {
		return
	}
	_, p.err = fmt.Fprintf(p.w, "%s%s\n", strings.Repeat("  ", indent), fmt.Sprintf(format, args...))
}

// block prints text under a label ("thinking: ", "-> "), continuation
// lines aligned below the first, at most max lines unless --full.
func (p *printer) block(indent int, label, text string, max int) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	extra := 0
	if !p.full && len(lines) > max {
		extra = len(lines) - max
		lines = lines[:max]
	}
	pad := strings.Repeat(" ", utf8.RuneCountInString(label))
	for i, l := range lines {
		if !p.full {
			l = clip(l, maxLineRunes)
		}
		lead := pad
		if i == 0 {
			lead = label
		}
		p.line(indent, "%s%s", lead, sanitize(l))
	}
	if extra > 0 {
		p.line(indent, "%s... (%d more lines; --full shows all)", pad, extra)
	}
}

func (p *printer) session(s *forge.Session, turns int) {
	p.line(0, "session %s  agent %s  (%s)", safe(s.ID, 80), safe(s.Agent, 80), safe(s.Kind, 20))
	if s.Title != "" {
		p.line(0, "title: %s", safe(s.Title, maxLineRunes))
	}
	p.line(0, "created %s, updated %s; %s; usage %s", when(s.CreatedAt), when(s.UpdatedAt), plural(turns, "turn"), usage(s.Usage))
}

func (p *printer) turn(t *forge.Turn, msgs []forge.Message) {
	p.line(0, "")
	facts := []string{t.Status}
	if t.Iterations > 0 {
		facts = append(facts, plural(t.Iterations, "model call"))
	}
	facts = append(facts, usage(t.Usage))
	if t.EndedAt != nil {
		facts = append(facts, t.EndedAt.Sub(t.CreatedAt).Round(time.Millisecond).String())
	}
	p.line(0, "turn %s  %s  (%s)", safe(t.ID, 80), when(t.CreatedAt), strings.Join(facts, ", "))
	p.overrides(t.Overrides)
	for _, in := range t.Input {
		switch in.Type {
		case forge.InputApproval:
			verdict := "denied"
			if in.Approved != nil && *in.Approved {
				verdict = "approved"
			}
			if in.Reason != "" {
				verdict += ": " + safe(in.Reason, maxLineRunes)
			}
			p.line(1, "input: %s %s", safe(in.CallID, 80), verdict)
		case forge.InputAuth:
			p.line(1, "input: authorization for %s (token not shown)", safe(in.CallID, 80))
		}
	}
	for i := range msgs {
		p.message(&msgs[i])
	}
	for _, a := range t.RequiredActions {
		what := safe(a.Type, 40)
		switch {
		case a.Server != "":
			what += " for MCP server " + safe(a.Server, 80)
			if a.AuthURL != "" {
				what += " at " + safe(a.AuthURL, maxLineRunes)
			}
		case a.Tool != "":
			what += " of " + safe(a.Tool, 80) + " " + p.args(a.Arguments)
		}
		p.line(1, "waiting for %s (call %s)", what, safe(a.CallID, 80))
	}
	if t.Error != nil {
		p.block(1, "error: ", t.Error.Code+": "+t.Error.Message, maxOutputLines)
	}
	if t.CancelReason != nil {
		why := "cancelled (" + safe(*t.CancelReason, 40) + ")"
		if t.CancelMessage != nil && *t.CancelMessage != "" {
			why += ": " + safe(*t.CancelMessage, maxLineRunes)
		}
		p.line(1, "%s", why)
	}
}

// overrides prints the per-request settings a turn ran with: one line of
// settings, then the instructions it added.
func (p *printer) overrides(o *forge.TurnOverrides) {
	if o.Empty() {
		return
	}
	var set []string
	num := func(name string, v *float64) {
		if v != nil {
			set = append(set, name+" "+strconv.FormatFloat(*v, 'g', -1, 64))
		}
	}
	num("temperature", o.Temperature)
	num("top_p", o.TopP)
	if o.MaxOutputTokens != nil {
		set = append(set, "max_output_tokens "+strconv.Itoa(*o.MaxOutputTokens))
	}
	if len(o.Tools) > 0 {
		names := make([]string, len(o.Tools))
		for i, t := range o.Tools {
			names[i] = safe(t.Name, 80)
		}
		set = append(set, "client tools "+strings.Join(names, ", "))
	}
	if o.OutputSchema != nil {
		set = append(set, "output_schema "+safe(o.OutputSchema.Name, 80))
	}
	if len(set) > 0 {
		p.line(1, "overrides: %s", strings.Join(set, "; "))
	}
	if o.Instructions != "" {
		p.block(1, "instructions: ", o.Instructions, maxThinkLines)
	}
}

func (p *printer) message(m *forge.Message) {
	head := m.Role
	if m.Author != "" && m.Author != m.Role {
		head += " " + safe(m.Author, 80)
	}
	if m.Model != "" {
		head += " (" + safe(m.Model, 80) + ")"
	}
	if m.ThreadID != "" && m.ThreadID != p.mainThread {
		head += " [thread " + safe(m.ThreadID, 80) + "]"
	}
	if m.Summary {
		head += " [summary]"
	}
	p.line(1, "%s:", head)
	for _, part := range m.Parts {
		p.part(part)
	}
}

func (p *printer) part(pt *forge.Part) {
	switch pt.Type {
	case forge.PartText:
		if pt.Text == "" {
			return
		}
		p.block(2, "", pt.Text+p.state(pt), maxTextLines)
	case forge.PartReasoning:
		if pt.Text == "" {
			return
		}
		p.block(2, "thinking: ", pt.Text+p.state(pt), maxThinkLines)
	case forge.PartTool:
		p.line(2, "[tool %s %s]%s", safe(pt.Tool, 80), p.args(pt.Arguments), p.state(pt))
		switch {
		case pt.Error != nil:
			p.block(3, "-> error: ", *pt.Error, maxOutputLines)
		case pt.Output != nil:
			out := *pt.Output
			if out == "" {
				out = "(no output)"
			}
			p.block(3, "-> ", out, maxOutputLines)
		}
	case forge.PartPatch:
		var patch struct {
			Files []struct {
				Path           string
				Status         string
				Added, Removed int
			}
		}
		_ = json.Unmarshal(pt.Data, &patch)
		for _, f := range patch.Files {
			p.line(2, "[file %s %s +%d -%d]", safe(f.Status, 20), safe(f.Path, maxLineRunes), f.Added, f.Removed)
		}
	case forge.PartCompaction:
		var d forge.CompactionData
		_ = json.Unmarshal(pt.Data, &d)
		p.line(2, "[context compacted (%s)]", safe(d.Reason, 40))
	case forge.PartSubtask:
		var d forge.SubtaskData
		_ = json.Unmarshal(pt.Data, &d)
		p.line(2, "[subtask %s %s: %s]", safe(d.Agent, 80), safe(d.Status, 40), clip(sanitize(oneLine(d.Prompt, maxArgRunes)), maxArgRunes))
	case forge.PartAgent:
		var d forge.AgentData
		name := pt.Text // a forum copy's agent part names its agent in text
		if json.Unmarshal(pt.Data, &d) == nil && d.Name != "" {
			name = d.Name
		}
		p.line(2, "[@%s]", safe(name, 80))
	case forge.PartStepStart, forge.PartStepFinish:
		// The turn line carries the usage; steps add nothing readable.
	default:
		what := "[" + safe(pt.Type, 40)
		if pt.Text != "" {
			what += " " + clip(sanitize(oneLine(pt.Text, maxArgRunes)), maxArgRunes)
		}
		p.line(2, "%s]", what)
	}
}

// state marks a part that did not complete.
func (p *printer) state(pt *forge.Part) string {
	switch pt.State {
	case "", forge.StateCompleted:
		return ""
	default:
		return " [" + safe(pt.State, 20) + "]"
	}
}

func (p *printer) args(raw json.RawMessage) string {
	if p.full {
		return sanitize(compactJSON(raw, 1<<30))
	}
	return sanitize(compactJSON(raw, maxArgRunes))
}

// usage summarizes token counts and cost.
func usage(u forge.Usage) string {
	s := fmt.Sprintf("%d in / %d out tokens", u.InputTokens, u.OutputTokens)
	if u.ReasoningTokens > 0 {
		s += fmt.Sprintf(" (%d reasoning)", u.ReasoningTokens)
	}
	if u.CacheReadTokens > 0 {
		s += fmt.Sprintf(", %d cached", u.CacheReadTokens)
	}
	if u.Cost > 0 {
		s += fmt.Sprintf(", $%.4f", u.Cost)
	}
	return s
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// safe makes a short field printable on one line.
func safe(s string, max int) string { return clip(sanitize(oneLine(s, max)), max) }

// clip shortens s to max runes.
func clip(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return string(r[:max]) + "..."
}

// sanitize keeps what a model or a tool wrote from driving the terminal:
// control characters (escape sequences among them) other than tab are
// shown as \xNN or \u{N}, invalid UTF-8 as U+FFFD.
func sanitize(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (unicode.IsControl(r) && r != '\t' && r != '\n') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t' || r == '\n':
			b.WriteRune(r)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u{%x}`, r)
		default:
			b.WriteRune(r) // invalid bytes decode as U+FFFD
		}
	}
	return b.String()
}
