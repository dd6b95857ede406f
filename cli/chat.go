package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// chatOptions are the flags of forge chat.
type chatOptions struct {
	serverFlags
	agent   string
	model   string
	session string
	// modelSet tells an explicit --model from its default.
	modelSet bool
	// color enables ANSI styling (dim reasoning and tool lines).
	color bool
	// echo repeats each input line on the output (when the input is not a
	// terminal, which echoes it already).
	echo bool
	// attach are files uploaded at the start and attached to the first
	// message.
	attach []string
}

const defaultChatModel = "scripted/echo"

func newChatCommand() *cobra.Command {
	var o chatOptions
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Chat with an agent of a running Forge server",
		Long: `Chat with an agent of a running Forge server, streaming its answers.

Without --agent, chat uses the server's only (or first) agent, and creates
one named "assistant" with --model when the server has none. Without
--session it starts a new session; with it, it continues that session
(following a turn that is still running, or asking for the answers a
paused turn waits for).

While a turn streams, Ctrl-C cancels it and returns to the prompt. At the
prompt, Ctrl-C, Ctrl-D or /quit exits. /new starts a new session.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.modelSet = cmd.Flags().Changed("model")
			c, err := o.client("forge-chat")
			if err != nil {
				return err
			}
			// Ctrl-C belongs to the chat (it cancels a turn rather than
			// exiting), so the chat does not run under the root's
			// signal-cancelled context.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			o.color = isTerminal(cmd.OutOrStdout()) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
			o.echo = !isTerminal(cmd.InOrStdin())
			return runChat(context.WithoutCancel(cmd.Context()), c, cmd.InOrStdin(), cmd.OutOrStdout(), sigs, o)
		},
	}
	f := cmd.Flags()
	o.register(f)
	f.StringVar(&o.agent, "agent", "", "agent to talk to (default: the server's only or first agent)")
	f.StringVar(&o.model, "model", defaultChatModel, "model of the agent chat creates when it has none to use")
	f.StringVar(&o.session, "session", "", "session to continue (default: a new session)")
	f.StringArrayVar(&o.attach, "attach", nil, "a file to upload and attach to the first message (repeatable; /attach PATH does it for the next message)")
	return cmd
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// errQuit ends the chat (SIGTERM, or end of input while answering).
var errQuit = errors.New("quit")

// errInterrupted is a Ctrl-C at a prompt.
var errInterrupted = errors.New("interrupted")

type lineResult struct {
	text string
	err  error
}

// chat is one interactive session of forge chat.
type chat struct {
	c     *client.Client
	out   io.Writer
	lines <-chan lineResult
	sigs  <-chan os.Signal
	opts  chatOptions

	agent   string
	model   string
	session *forge.Session
	// calls holds the ids of the tool calls already shown, so that a call
	// that paused a turn is not shown again when the next turn runs it.
	calls map[string]bool
	// bol is true when the output cursor is at the start of a line.
	bol bool
	// files are uploaded files waiting for the next message.
	files []forge.InputFile
}

// runChat runs the chat loop: it reads lines from in, writes everything to
// out, and takes interrupts (os.Interrupt cancels a streaming turn or, at
// the prompt, exits; syscall.SIGTERM exits) from sigs.
func runChat(ctx context.Context, c *client.Client, in io.Reader, out io.Writer, sigs <-chan os.Signal, o chatOptions) error {
	stop := make(chan struct{})
	defer close(stop)
	ch := &chat{c: c, out: out, lines: readLines(in, stop), sigs: sigs, opts: o, bol: true}
	if err := ch.start(ctx); err != nil {
		return errors.New(describe(err, c))
	}
	ch.say("forge chat: agent %s (%s), session %s", ch.agent, ch.model, ch.session.ID)
	for _, p := range o.attach {
		if err := ch.attach(ctx, p); err != nil {
			return errors.New(describe(err, c))
		}
	}
	ch.say("Ctrl-C cancels a turn; Ctrl-D or /quit exits; /new starts a new session; /help lists commands.")
	if err := ch.resume(ctx); err != nil {
		if errors.Is(err, errQuit) {
			return nil
		}
		ch.fail(err)
	}
	for {
		line, err := ch.readLine("> ")
		if err != nil {
			ch.newline()
			if errors.Is(err, io.EOF) || errors.Is(err, errInterrupted) || errors.Is(err, errQuit) {
				return nil // Ctrl-D, Ctrl-C or SIGTERM at the prompt
			}
			return err
		}
		text := strings.TrimSpace(line)
		if text == "" {
			continue
		}
		if strings.HasPrefix(text, "/") && !strings.HasPrefix(text, "//") {
			quit, err := ch.command(ctx, text)
			if err != nil {
				ch.fail(err)
			}
			if quit {
				return nil
			}
			continue
		}
		if strings.HasPrefix(text, "//") {
			text = text[1:] // "//x" sends "/x"
		}
		input := client.Message(text)
		input[0].Files, ch.files = ch.files, nil
		if err := ch.converse(ctx, input, true); err != nil {
			if errors.Is(err, errQuit) {
				ch.newline()
				return nil
			}
			ch.fail(err)
		}
	}
}

// readLines reads in line by line on its own goroutine, so that a prompt
// can wait for a line and an interrupt at once.
func readLines(in io.Reader, stop <-chan struct{}) <-chan lineResult {
	ch := make(chan lineResult)
	go func() {
		defer close(ch)
		br := bufio.NewReader(in)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				select {
				case ch <- lineResult{text: strings.TrimRight(s, "\r\n")}:
				case <-stop:
					return
				}
			}
			if err != nil {
				if err != io.EOF {
					err = fmt.Errorf("reading input: %w", err)
				}
				select {
				case ch <- lineResult{err: err}:
				case <-stop:
				}
				return
			}
		}
	}()
	return ch
}

// readLine prompts and waits for a line. It returns io.EOF at the end of
// input, errInterrupted on Ctrl-C and errQuit on SIGTERM.
func (ch *chat) readLine(prompt string) (string, error) {
	ch.newline()
	ch.write(prompt)
	select {
	case l, ok := <-ch.lines:
		if !ok {
			ch.bol = false
			return "", io.EOF
		}
		if l.err != nil {
			ch.bol = false
			return "", l.err
		}
		if ch.opts.echo {
			ch.write(l.text + "\n")
		}
		ch.bol = true // the terminal echoed the user's newline
		return l.text, nil
	case sig := <-ch.sigs:
		ch.bol = false
		if sig == syscall.SIGTERM {
			return "", errQuit
		}
		return "", errInterrupted
	}
}

// start picks the agent and the session.
func (ch *chat) start(ctx context.Context) error {
	if ch.opts.session != "" {
		ses, err := ch.c.GetSession(ctx, ch.opts.session)
		if err != nil {
			return err
		}
		ch.session, ch.agent = ses, ses.Agent
		ch.model = "?"
		if ag, err := ch.c.GetAgent(ctx, ses.Agent); err == nil {
			ch.model = ag.Model
		}
		return nil
	}
	ag, err := ch.pickAgent(ctx)
	if err != nil {
		return err
	}
	ch.agent, ch.model = ag.Name, ag.Model
	return ch.newSession(ctx)
}

func (ch *chat) pickAgent(ctx context.Context) (*forge.Agent, error) {
	model := ch.opts.model
	if model == "" {
		model = defaultChatModel
	}
	if name := ch.opts.agent; name != "" {
		ag, err := ch.c.GetAgent(ctx, name)
		if err == nil || !client.IsNotFound(err) {
			return ag, err
		}
		if !ch.opts.modelSet {
			return nil, fmt.Errorf("agent %q does not exist (give --model to create it)", name)
		}
		return ch.createAgent(ctx, name, model)
	}
	page, err := ch.c.ListAgents(ctx, client.ListOptions{Limit: 100})
	if err != nil {
		return nil, err
	}
	switch len(page.Data) {
	case 0:
		return ch.createAgent(ctx, "assistant", model)
	case 1:
		return &page.Data[0], nil
	}
	ag := &page.Data[0]
	ch.say("using agent %s (the server has %d agents; choose one with --agent)", ag.Name, len(page.Data))
	return ag, nil
}

func (ch *chat) createAgent(ctx context.Context, name, model string) (*forge.Agent, error) {
	ag, err := ch.c.CreateAgent(ctx, &forge.Agent{Name: name, Model: model})
	if client.IsConflict(err) {
		return ch.c.GetAgent(ctx, name) // created meanwhile by someone else
	}
	if err != nil {
		return nil, err
	}
	ch.say("created agent %s (%s)", ag.Name, ag.Model)
	return ag, nil
}

func (ch *chat) newSession(ctx context.Context) error {
	ses, err := ch.c.CreateSession(ctx, client.CreateSessionRequest{Agent: ch.agent})
	if err != nil {
		return err
	}
	ch.session = ses
	return nil
}

// command runs a /command; it reports whether the chat should end.
func (ch *chat) command(ctx context.Context, text string) (bool, error) {
	name, _, _ := strings.Cut(text, " ")
	switch name {
	case "/quit", "/exit":
		return true, nil
	case "/new":
		if err := ch.newSession(ctx); err != nil {
			return false, err
		}
		ch.say("new session %s", ch.session.ID)
	case "/attach":
		_, p, _ := strings.Cut(text, " ")
		if p = strings.TrimSpace(p); p == "" {
			ch.say("usage: /attach PATH (the file goes with the next message)")
			break
		}
		if err := ch.attach(ctx, p); err != nil {
			return false, err
		}
	case "/session":
		ch.say("session %s, agent %s (%s)", ch.session.ID, ch.agent, ch.model)
	case "/help":
		ch.say("/new      start a new session with the same agent")
		ch.say("/attach P upload file P and attach it to the next message")
		ch.say("/session  show the session id (continue it later with --session)")
		ch.say("/quit     exit (also Ctrl-D, or Ctrl-C at the prompt)")
		ch.say("//text    send a message that starts with /")
	default:
		ch.say("unknown command %s (try /help)", name)
	}
	return false, nil
}

// attach uploads the file at path and keeps it for the next message.
func (ch *chat) attach(ctx context.Context, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	up, err := ch.c.UploadFile(ctx, filepath.Base(path), f, client.UploadOptions{})
	if err != nil {
		return fmt.Errorf("attaching %s: %w", path, err)
	}
	ch.files = append(ch.files, forge.InputFile{FileID: up.ID})
	ch.say("attached %s (%s, %d bytes) to the next message", up.Filename, up.MimeType, up.Bytes)
	return nil
}

// resume, for a continued session, follows its running turn or asks for
// the answers its paused turn waits for.
func (ch *chat) resume(ctx context.Context) error {
	tip := ch.session.TipTurnID
	if ch.opts.session == "" || tip == nil {
		return nil
	}
	t, err := ch.c.GetTurn(ctx, ch.session.ID, *tip)
	if err != nil {
		return err
	}
	switch {
	case t.Status == forge.TurnRunning:
		ch.say("following the running turn %s", t.ID)
		id := t.ID
		t, err = ch.stream(ctx, func(ctx context.Context) iter.Seq2[forge.Event, error] {
			return ch.c.TurnEvents(ctx, ch.session.ID, id, 0)
		})
		if err != nil || t == nil {
			return err
		}
		return ch.after(ctx, t)
	case t.Status == forge.TurnDone && len(t.RequiredActions) > 0:
		return ch.after(ctx, t)
	}
	return nil
}

// converse runs a turn with input, then as many turns as it takes to
// answer the calls the turns leave open.
func (ch *chat) converse(ctx context.Context, input []forge.Input, isMessage bool) error {
	if isMessage || ch.calls == nil {
		ch.calls = map[string]bool{}
	}
	for input != nil {
		req := client.TurnRequest{Input: input}
		t, err := ch.stream(ctx, func(ctx context.Context) iter.Seq2[forge.Event, error] {
			return ch.c.StreamTurn(ctx, ch.session.ID, req)
		})
		if errors.Is(err, forge.ErrPendingActions) && isMessage {
			// The session waits for answers (an earlier chat left them).
			ch.say("the session waits for answers to open tool calls; your message was not sent")
			t, err = ch.tipTurn(ctx)
		}
		if err != nil || t == nil {
			return err
		}
		isMessage = false
		if input, err = ch.answers(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// after handles the end of a turn that was not started by converse.
func (ch *chat) after(ctx context.Context, t *forge.Turn) error {
	input, err := ch.answers(ctx, t)
	if err != nil || input == nil {
		return err
	}
	return ch.converse(ctx, input, false)
}

func (ch *chat) tipTurn(ctx context.Context) (*forge.Turn, error) {
	ses, err := ch.c.GetSession(ctx, ch.session.ID)
	if err != nil {
		return nil, err
	}
	if ses.TipTurnID == nil {
		return nil, errors.New("the session has no turn to answer")
	}
	return ch.c.GetTurn(ctx, ses.ID, *ses.TipTurnID)
}

// answers reports how turn t ended and, when it waits for answers, asks
// the user for them: it returns the input of the next turn, nil if none.
func (ch *chat) answers(ctx context.Context, t *forge.Turn) ([]forge.Input, error) {
	switch t.Status {
	case forge.TurnCancelled:
		reason := "cancelled"
		if t.CancelReason != nil {
			reason = "cancelled (" + *t.CancelReason + ")"
		}
		ch.meta("[turn %s]", reason)
		return nil, nil
	case forge.TurnErrored:
		if t.Error != nil {
			ch.say("error: %s (%s)", oneLine(t.Error.Message, 300), t.Error.Code)
		} else {
			ch.say("error: the turn failed")
		}
		return nil, nil
	case forge.TurnRunning:
		return nil, nil
	}
	if len(t.RequiredActions) == 0 {
		return nil, nil
	}
	var input []forge.Input
	for _, a := range t.RequiredActions {
		in, err := ch.ask(a)
		if err != nil {
			if errors.Is(err, errInterrupted) {
				ch.newline()
				ch.say("(left unanswered: the session waits for these answers before the next message)")
				return nil, nil
			}
			if errors.Is(err, io.EOF) {
				return nil, errQuit
			}
			return nil, err
		}
		input = append(input, in)
	}
	return input, nil
}

// ask gets the user's answer to one required action.
func (ch *chat) ask(a forge.RequiredAction) (forge.Input, error) {
	args := compactJSON(a.Arguments, 200)
	switch a.Type {
	case forge.ActionApproval:
		line, err := ch.readLine(fmt.Sprintf("approve %s %s? [y/N] ", a.Tool, args))
		if err != nil {
			return forge.Input{}, err
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return client.Approve(a.CallID, true, ""), nil
		}
		reason, err := ch.readLine("reason (optional): ")
		if err != nil {
			return forge.Input{}, err
		}
		return client.Approve(a.CallID, false, strings.TrimSpace(reason)), nil
	case forge.ActionClientTool:
		ch.meta("[client tool %s %s]", a.Tool, args)
		line, err := ch.readLine(fmt.Sprintf("output of %s> ", a.Tool))
		if err != nil {
			return forge.Input{}, err
		}
		return client.ToolResult(a.CallID, line, false), nil
	case forge.ActionAuth:
		line, err := ch.readLine(fmt.Sprintf("token for %s> ", a.Tool))
		if err != nil {
			return forge.Input{}, err
		}
		return client.AuthToken(a.CallID, strings.TrimSpace(line)), nil
	}
	return forge.Input{}, fmt.Errorf("the turn waits for a %q action this client does not know", a.Type)
}

type streamItem struct {
	ev  forge.Event
	err error
}

// stream renders a turn's events until turn.done and returns the ended
// turn. Ctrl-C asks the server to cancel the turn and keeps streaming until
// the turn has ended; a second Ctrl-C stops waiting (returns nil, nil).
func (ch *chat) stream(ctx context.Context, events func(context.Context) iter.Seq2[forge.Event, error]) (*forge.Turn, error) {
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	items := make(chan streamItem)
	go func() {
		defer close(items)
		for ev, err := range events(sctx) {
			select {
			case items <- streamItem{ev, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	r := newRenderer(ch)
	cancelling := false
	cancelled := make(chan error, 4)
	requestCancel := func() {
		go func() {
			_, err := ch.c.Cancel(sctx, ch.session.ID, client.CancelRequest{Reason: "cancelled from forge chat"})
			cancelled <- err
		}()
	}
	for {
		select {
		case it, ok := <-items:
			if !ok {
				ch.newline()
				return nil, errors.New("the event stream ended before the turn did")
			}
			if it.err != nil {
				ch.newline()
				return nil, it.err
			}
			r.render(it.ev)
			switch it.ev.Type {
			case forge.EventTurnCreated:
				if cancelling {
					requestCancel() // the first request may have come before the turn
				}
			case forge.EventTurnDone:
				ch.newline()
				var t forge.Turn
				if err := json.Unmarshal(it.ev.Data, &t); err != nil {
					return nil, fmt.Errorf("reading the turn's end: %w", err)
				}
				return &t, nil
			}
		case err := <-cancelled:
			if err != nil && !client.IsConflict(err) && sctx.Err() == nil {
				ch.newline()
				ch.say("could not cancel: %s", describe(err, ch.c))
			}
		case sig := <-ch.sigs:
			if sig == syscall.SIGTERM {
				return nil, errQuit
			}
			r.cur = ""
			if cancelling {
				ch.meta("[stopped waiting; the turn may still be running]")
				return nil, nil
			}
			cancelling = true
			ch.meta("[cancelling... Ctrl-C again to stop waiting]")
			requestCancel()
		}
	}
}

// renderer prints a turn's events: text token by token, reasoning dimmed
// (or prefixed), tool calls and results on lines of their own.
type renderer struct {
	ch      *chat
	parts   map[string]*partState
	threads map[string]string // child thread id -> agent
	cur     string            // the part whose text was printed last
}

type partState struct {
	typ     string
	printed string
}

func newRenderer(ch *chat) *renderer {
	if ch.calls == nil {
		ch.calls = map[string]bool{}
	}
	return &renderer{ch: ch, parts: map[string]*partState{}, threads: map[string]string{}}
}

func (r *renderer) child(ev forge.Event) bool {
	if ev.ThreadID == nil {
		return false
	}
	_, ok := r.threads[*ev.ThreadID]
	return ok
}

func (r *renderer) render(ev forge.Event) {
	ch := r.ch
	switch ev.Type {
	case forge.EventModelMessage:
		var p forge.Part
		if json.Unmarshal(ev.Data, &p) != nil {
			return
		}
		st := r.part(ev.ID, p.Type)
		if r.child(ev) {
			return // a subagent's words reach the user through its result
		}
		// A part's events carry its whole text so far: print what the
		// deltas did not (a resumed stream, a provider that does not
		// stream).
		if strings.HasPrefix(p.Text, st.printed) && len(p.Text) > len(st.printed) {
			r.text(ev.ID, st, p.Text[len(st.printed):])
		}
		if p.State == forge.StateInterrupted && r.cur == ev.ID && !ch.bol {
			r.cur = ""
			ch.meta(" [interrupted]")
		}
	case forge.EventModelDelta:
		var d forge.DeltaData
		if json.Unmarshal(ev.Data, &d) != nil || d.Delta == "" || r.child(ev) {
			return
		}
		r.text(ev.ID, r.part(ev.ID, forge.PartText), d.Delta)
	case forge.EventToolCall:
		var p forge.Part
		if json.Unmarshal(ev.Data, &p) != nil || ch.calls[p.CallID] {
			return
		}
		ch.calls[p.CallID] = true
		r.cur = ""
		ch.newline()
		ch.meta("%s[tool %s %s]", r.indent(ev), p.Tool, compactJSON(p.Arguments, 200))
	case forge.EventToolResponse:
		var p forge.Part
		if json.Unmarshal(ev.Data, &p) != nil {
			return
		}
		r.cur = ""
		ch.newline()
		if p.State == forge.StateError || p.Error != nil {
			msg := "failed"
			if p.Error != nil {
				msg = *p.Error
			}
			ch.meta("%s  -> error: %s", r.indent(ev), brief(msg))
			return
		}
		out := ""
		if p.Output != nil {
			out = *p.Output
		}
		ch.meta("%s  -> %s", r.indent(ev), brief(out))
	case forge.EventThreadCreated:
		var d struct {
			Agent string `json:"agent"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		r.threads[ev.ID] = d.Agent
		r.cur = ""
		ch.newline()
		ch.meta("[subagent %s started]", d.Agent)
	case forge.EventThreadDone:
		r.cur = ""
		ch.newline()
		ch.meta("[subagent %s done]", r.threads[ev.ID])
	case forge.EventSessionCompacted:
		r.cur = ""
		ch.newline()
		ch.meta("[context compacted]")
	}
}

func (r *renderer) indent(ev forge.Event) string {
	if r.child(ev) {
		return "  "
	}
	return ""
}

func (r *renderer) part(id, typ string) *partState {
	st := r.parts[id]
	if st == nil {
		st = &partState{typ: typ}
		r.parts[id] = st
	}
	return st
}

// text prints s, the continuation of part id.
func (r *renderer) text(id string, st *partState, s string) {
	ch := r.ch
	if r.cur != id {
		ch.newline()
		if st.typ == forge.PartReasoning && !ch.opts.color {
			ch.write("thinking: ")
		}
		r.cur = id
	}
	st.printed += s
	if st.typ == forge.PartReasoning && ch.opts.color {
		ch.write("\x1b[2m" + s + "\x1b[0m")
		return
	}
	ch.write(s)
}

// write prints s as is, tracking whether the cursor is at a line start.
func (ch *chat) write(s string) {
	if s == "" {
		return
	}
	_, _ = io.WriteString(ch.out, s)
	ch.bol = strings.HasSuffix(s, "\n") || strings.HasSuffix(s, "\n\x1b[0m")
}

// newline ends the current line, if any.
func (ch *chat) newline() {
	if !ch.bol {
		ch.write("\n")
	}
}

// say prints a line.
func (ch *chat) say(format string, args ...any) {
	ch.newline()
	ch.write(fmt.Sprintf(format, args...) + "\n")
}

// meta prints a line about the turn (tool calls, status), dimmed in color.
// A format starting with a space continues the current line.
func (ch *chat) meta(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(s, " ") {
		ch.newline()
	}
	if ch.opts.color {
		s = "\x1b[2m" + s + "\x1b[0m"
	}
	ch.write(s + "\n")
}

// fail prints an error as one readable line.
func (ch *chat) fail(err error) {
	ch.say("error: %s", describe(err, ch.c))
}

// describe makes err one readable line.
func describe(err error, c *client.Client) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return oneLine(ae.Error(), 300)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" {
			return fmt.Sprintf("cannot reach the Forge server at %s (is `forge serve` running? set --server or FORGE_URL)", c.BaseURL())
		}
		return oneLine(fmt.Sprintf("talking to %s: %v", c.BaseURL(), ue.Err), 300)
	}
	return oneLine(err.Error(), 300)
}

// oneLine squeezes s onto one line of at most max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max]) + "..."
	}
	return s
}

// compactJSON renders a JSON value on one line, shortened to max runes.
func compactJSON(raw json.RawMessage, max int) string {
	if len(raw) == 0 {
		return "{}"
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return oneLine(string(raw), max)
	}
	return oneLine(b.String(), max)
}

// brief shows a tool's output as its first line, shortened, with a count
// of the lines left out.
func brief(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "(no output)"
	}
	lines := strings.Split(s, "\n")
	first := oneLine(lines[0], 120)
	if len(lines) > 1 {
		return fmt.Sprintf("%s (+%d lines)", first, len(lines)-1)
	}
	return first
}
