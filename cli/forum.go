package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

// forumOptions are the flags of forge forum.
type forumOptions struct {
	server string
	apiKey string
	forum  string
	title  string
	as     string
	agents []string
	humans []string
}

func newForumCommand() *cobra.Command {
	var o forumOptions
	cmd := &cobra.Command{
		Use:   "forum",
		Short: "Talk in a forum (a room of humans and agents) from a terminal",
		Long: `Talk in a forum of a running Forge server: each line you type is posted
as the human --as; the room's messages, agents' replies, joins, leaves,
guard notices and who is typing are shown as they happen.

Without --forum it creates a forum (titled --title). --agent NAME adds an
agent member (NAME=always or NAME=mention sets its trigger policy; the
default is auto), --human ID another human; members already in the room
are left as they are. /quit or Ctrl-D exits; /members lists the room.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.as == "" {
				return errors.New("--as is required: the human you talk as")
			}
			c, err := client.New(o.server, client.WithAPIKey(o.apiKey), client.WithUserAgent("forge-forum/"+Version))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.WithoutCancel(cmd.Context()), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runForum(ctx, c, cmd.InOrStdin(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	server := os.Getenv("FORGE_URL")
	if server == "" {
		server = "http://127.0.0.1:8080"
	}
	f.StringVar(&o.server, "server", server, "URL of the Forge server (env FORGE_URL)")
	f.StringVar(&o.apiKey, "api-key", os.Getenv("FORGE_API_KEY"), "API key (env FORGE_API_KEY)")
	f.StringVar(&o.forum, "forum", "", "forum to join (default: create one)")
	f.StringVar(&o.title, "title", "forum", "title of the forum created without --forum")
	f.StringVar(&o.as, "as", "", "the human id you talk as (joined if not a member)")
	f.StringArrayVar(&o.agents, "agent", nil, "agent to add: NAME or NAME=auto|mention|always (repeatable)")
	f.StringArrayVar(&o.humans, "human", nil, "another human to add (repeatable)")
	return cmd
}

// forumTalk is one terminal in a forum.
type forumTalk struct {
	c     *client.Client
	out   io.Writer
	forum string

	mu    sync.Mutex        // guards out and names
	names map[string]string // display name by participant id
}

func (t *forumTalk) say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, format+"\n", args...)
}

func runForum(ctx context.Context, c *client.Client, in io.Reader, out io.Writer, o forumOptions) error {
	t := &forumTalk{c: c, out: out, forum: o.forum, names: map[string]string{}}
	if t.forum == "" {
		f, err := c.CreateForum(ctx, client.CreateForumRequest{Title: o.title})
		if err != nil {
			return errors.New(describe(err, c))
		}
		t.forum = f.ID
	} else if _, err := c.GetForum(ctx, t.forum); err != nil {
		return errors.New(describe(err, c))
	}
	if err := t.join(ctx, o); err != nil {
		return errors.New(describe(err, c))
	}
	t.say("forge forum %s: you are %s. /members lists the room, /quit exits.", t.forum, o.as)
	evCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan error, 1)
	go func() { followed <- t.follow(evCtx) }()
	stop := make(chan struct{})
	defer close(stop)
	lines := readLines(in, stop)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-followed:
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("the forum's event stream ended: %s", describe(err, c))
			}
			return nil
		case l, ok := <-lines:
			if !ok || l.err != nil {
				return nil
			}
			text := strings.TrimSpace(l.text)
			switch text {
			case "":
				continue
			case "/quit", "/exit":
				return nil
			case "/members":
				t.members(ctx)
				continue
			}
			if _, err := c.Post(ctx, t.forum, client.PostRequest{Author: o.as, Text: l.text}); err != nil {
				t.say("! not posted: %s", describe(err, c))
			}
		}
	}
}

// join adds the members the flags name that are not in the room yet.
func (t *forumTalk) join(ctx context.Context, o forumOptions) error {
	page, err := t.c.ListMembers(ctx, t.forum, false, client.ListOptions{Limit: 10000})
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, p := range page.Data {
		present[p.ActorID] = true
	}
	for _, h := range append([]string{o.as}, o.humans...) {
		if present["human:"+h] {
			continue
		}
		if _, err := t.c.AddHuman(ctx, t.forum, h); err != nil && !client.IsConflict(err) {
			return err
		}
		present["human:"+h] = true
	}
	for _, a := range o.agents {
		name, trigger, _ := strings.Cut(a, "=")
		if present["agent:"+name] {
			continue
		}
		if _, err := t.c.AddAgent(ctx, t.forum, name, trigger); err != nil && !client.IsConflict(err) {
			return err
		}
		present["agent:"+name] = true
	}
	return nil
}

func (t *forumTalk) members(ctx context.Context) {
	page, err := t.c.ListMembers(ctx, t.forum, false, client.ListOptions{Limit: 10000})
	if err != nil {
		t.say("! %s", describe(err, t.c))
		return
	}
	var names []string
	for _, p := range page.Data {
		n := p.Actor.Name()
		if p.Actor.Type == forge.ActorAgent {
			n += " (agent, " + p.Trigger + ")"
		}
		names = append(names, n)
	}
	t.say("members: %s", strings.Join(names, ", "))
}

// follow prints the forum's events from its start, then live.
func (t *forumTalk) follow(ctx context.Context) error {
	for ev, err := range t.c.ForumEvents(ctx, t.forum, 0) {
		if err != nil {
			return err
		}
		t.show(ev)
	}
	return nil
}

func (t *forumTalk) show(ev forge.Event) {
	switch ev.Type {
	case forge.EventForumMemberJoined, forge.EventForumMemberLeft:
		var p forge.Participant
		if json.Unmarshal(ev.Data, &p) != nil {
			return
		}
		t.mu.Lock()
		t.names[p.ID] = p.Actor.Name()
		t.mu.Unlock()
		verb := "joined"
		if ev.Type == forge.EventForumMemberLeft {
			verb = "left"
		}
		t.say("* %s %s", p.Actor.Name(), verb)
	case forge.EventForumMessage:
		var m forge.ForumMessage
		if json.Unmarshal(ev.Data, &m) != nil {
			return
		}
		if m.Author == nil {
			t.say("! %s", m.Text)
			return
		}
		t.say("%s: %s", t.name(m.Author.ParticipantID, m.Author.ActorID), m.Text)
	case forge.EventForumTyping:
		var d struct {
			ParticipantID string `json:"participant_id"`
			Typing        bool   `json:"typing"`
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.Typing {
			t.say("… %s is typing", t.name(d.ParticipantID, ""))
		}
	case forge.EventMonologueCompacted:
		var d struct {
			ParticipantID string `json:"participant_id"`
		}
		if json.Unmarshal(ev.Data, &d) == nil {
			t.say("* %s's memory was compacted", t.name(d.ParticipantID, ""))
		}
	}
}

func (t *forumTalk) name(participantID, actorID string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, ok := t.names[participantID]; ok {
		return n
	}
	if _, n, ok := strings.Cut(actorID, ":"); ok {
		return n
	}
	return participantID
}
