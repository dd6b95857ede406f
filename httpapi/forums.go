package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
)

// Forums is the forum layer the HTTP layer calls (*forum.Service).
type Forums interface {
	CreateForum(ctx context.Context, tenant, title string, meta json.RawMessage, guards forge.ForumGuards) (*forge.Session, error)
	DeleteForum(ctx context.Context, tenant, forumID string) error
	DeleteMonologue(ctx context.Context, tenant, monologueID string) error
	Join(ctx context.Context, tenant, forumID string, actor forge.Actor, trigger string) (*forge.Participant, error)
	Leave(ctx context.Context, tenant, forumID, participantID string) (*forge.Participant, error)
	Post(ctx context.Context, tenant, forumID, author, text string, meta json.RawMessage, files []forge.FileData) (*forge.ForumMessage, error)
	Messages(ctx context.Context, tenant, forumID string, opts forge.ListOptions) ([]*forge.ForumMessage, string, error)
	Events(ctx context.Context, tenant, forumID string, after int64) (iter.Seq2[forge.Event, error], error)
}

// forumView is a forum as API.md shows it.
type forumView struct {
	ID        string            `json:"id"`
	Kind      string            `json:"kind"`
	Title     string            `json:"title"`
	Metadata  json.RawMessage   `json:"metadata"`
	Guards    forge.ForumGuards `json:"guards"`
	CreatedAt string            `json:"created_at"`
}

func viewForum(s *forge.Session) forumView {
	v := forumView{ID: s.ID, Kind: s.Kind, Title: s.Title, Metadata: s.Metadata, Guards: forge.DefaultForumGuards(),
		CreatedAt: s.CreatedAt.UTC().Format("2006-01-02T15:04:05.999999999Z07:00")}
	if s.Guards != nil {
		v.Guards = *s.Guards
	}
	if len(v.Metadata) == 0 {
		v.Metadata = json.RawMessage(`{}`)
	}
	return v
}

type pairWindowBody struct {
	Max     *int `json:"max"`
	Seconds *int `json:"seconds"`
}

type guardsBody struct {
	MaxAgentStreak *int            `json:"max_agent_streak"`
	PairWindow     *pairWindowBody `json:"pair_window"`
}

type forumBody struct {
	Title    *string         `json:"title"`
	Metadata json.RawMessage `json:"metadata"`
	Guards   *guardsBody     `json:"guards"`
}

func (s *Server) forums() (Forums, error) {
	if s.forumSvc == nil {
		return nil, forge.Errorf(forge.ErrNotFound, "this server runs no forums")
	}
	return s.forumSvc, nil
}

// objectOrEmpty returns m when it is a JSON object, {} when absent.
func objectOrEmpty(m json.RawMessage) (json.RawMessage, error) {
	m = bytes.TrimSpace(m)
	if len(m) == 0 || string(m) == "null" {
		return json.RawMessage(`{}`), nil
	}
	if m[0] != '{' {
		return nil, invalid("metadata must be a JSON object")
	}
	return m, nil
}

func (s *Server) createForum(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	var body forumBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	meta, err := objectOrEmpty(body.Metadata)
	if err != nil {
		return err
	}
	g := forge.DefaultForumGuards()
	if b := body.Guards; b != nil {
		if b.MaxAgentStreak != nil {
			if *b.MaxAgentStreak < 1 || *b.MaxAgentStreak > forge.MaxAgentStreakLimit {
				return invalid("guards.max_agent_streak must be between 1 and %d", forge.MaxAgentStreakLimit)
			}
			g.MaxAgentStreak = *b.MaxAgentStreak
		}
		if pw := b.PairWindow; pw != nil {
			if pw.Max != nil {
				if *pw.Max < 1 || *pw.Max > forge.PairWindowMaxLimit {
					return invalid("guards.pair_window.max must be between 1 and %d", forge.PairWindowMaxLimit)
				}
				g.PairWindow.Max = *pw.Max
			}
			if pw.Seconds != nil {
				if *pw.Seconds < 1 || *pw.Seconds > forge.PairWindowSecondsLimit {
					return invalid("guards.pair_window.seconds must be between 1 and %d", forge.PairWindowSecondsLimit)
				}
				g.PairWindow.Seconds = *pw.Seconds
			}
		}
	}
	title := ""
	if body.Title != nil {
		title = *body.Title
	}
	f, err := fs.CreateForum(r.Context(), tenantOf(r), title, meta, g)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/forums/"+url.PathEscape(f.ID))
	writeJSON(w, http.StatusCreated, viewForum(f))
	return nil
}

// forum loads the forum named by the path.
func (s *Server) forum(r *http.Request) (*forge.Session, error) {
	id := r.PathValue("fid")
	f, err := s.store.GetSession(r.Context(), tenantOf(r), id)
	if err != nil || f.Kind != forge.KindForum {
		return nil, forge.Errorf(forge.ErrNotFound, "forum %q not found", id)
	}
	return f, nil
}

func (s *Server) getForum(w http.ResponseWriter, r *http.Request) error {
	f, err := s.forum(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewForum(f))
	return nil
}

// listForums lists the tenant's forums: GET /v1/sessions?kind=forum, as
// forums.
func (s *Server) listForums(w http.ResponseWriter, r *http.Request) error {
	q, err := sessionQuery(r.URL.Query())
	if err != nil {
		return err
	}
	q.Kind = forge.KindForum
	page, next, err := s.store.ListSessions(r.Context(), tenantOf(r), q)
	if err != nil {
		return err
	}
	out := make([]forumView, 0, len(page))
	for _, ses := range page {
		out = append(out, viewForum(ses))
	}
	writeList(w, out, next)
	return nil
}

func (s *Server) deleteForum(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	if err := fs.DeleteForum(detach(r), tenantOf(r), r.PathValue("fid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type actorBody struct {
	Type  *string `json:"type"`
	ID    *string `json:"id"`
	Agent *string `json:"agent"`
}

type memberBody struct {
	Actor   *actorBody `json:"actor"`
	Trigger *string    `json:"trigger"`
}

// maxHumanID bounds a human member's id.
const maxHumanID = 256

// validHumanID reports whether id can name a human member: valid UTF-8
// without ':' (the model sees authors as human:<id>, so an id cannot pass
// for another kind or id), control characters or line and paragraph
// separators (a speaker's line is never broken).
func validHumanID(id string) bool {
	for _, c := range id {
		if c == ':' || c == utf8.RuneError || unicode.IsControl(c) || unicode.In(c, unicode.Zl, unicode.Zp) {
			return false
		}
	}
	return true
}

func (s *Server) addMember(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	var body memberBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	a := body.Actor
	if a == nil || a.Type == nil {
		return invalid(`actor is required: {"type": "human", "id": "..."} or {"type": "agent", "agent": "..."}`)
	}
	var actor forge.Actor
	trigger := ""
	switch *a.Type {
	case forge.ActorHuman:
		if a.ID == nil || *a.ID == "" || len(*a.ID) > maxHumanID || a.Agent != nil {
			return invalid("a human actor needs an id of 1 to %d bytes (and no agent)", maxHumanID)
		}
		if !validHumanID(*a.ID) {
			return invalid("a human id may not hold ':', control characters or line separators")
		}
		if body.Trigger != nil {
			return invalid("trigger applies to agent members only")
		}
		actor = forge.Actor{Type: forge.ActorHuman, ID: *a.ID}
	case forge.ActorAgent:
		if a.Agent == nil || !validAgentName(*a.Agent) || a.ID != nil {
			return invalid("an agent actor needs the agent's name (and no id)")
		}
		actor = forge.Actor{Type: forge.ActorAgent, Agent: *a.Agent}
		trigger = forge.TriggerAuto
		if body.Trigger != nil {
			switch *body.Trigger {
			case forge.TriggerAuto, forge.TriggerMention, forge.TriggerAlways:
				trigger = *body.Trigger
			default:
				return invalid("trigger must be auto, mention or always, got %q", *body.Trigger)
			}
		}
	default:
		return invalid("actor.type must be human or agent, got %q", *a.Type)
	}
	p, err := fs.Join(detach(r), tenantOf(r), r.PathValue("fid"), actor, trigger)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/forums/"+url.PathEscape(p.ForumID)+"/members/"+url.PathEscape(p.ID))
	writeJSON(w, http.StatusCreated, p)
	return nil
}

// validAgentName is API.md's agent name rule.
func validAgentName(n string) bool {
	if n == "" || len(n) > 64 || !nameStart(n[0]) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !nameStart(n[i]) && n[i] != '_' && n[i] != '-' {
			return false
		}
	}
	return true
}

func nameStart(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func (s *Server) listMembers(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	opts, err := listOptions(q, defaultListLimit)
	if err != nil {
		return err
	}
	all := false
	if q.Has("all") {
		switch q.Get("all") {
		case "true":
			all = true
		case "false":
		default:
			return invalid("all must be true or false")
		}
	}
	f, err := s.forum(r)
	if err != nil {
		return err
	}
	list, next, err := s.store.ListParticipants(r.Context(), tenantOf(r), f.ID, all, opts)
	if err != nil {
		return err
	}
	writeList(w, list, next)
	return nil
}

func (s *Server) getMember(w http.ResponseWriter, r *http.Request) error {
	f, err := s.forum(r)
	if err != nil {
		return err
	}
	p, err := s.store.GetParticipant(r.Context(), tenantOf(r), f.ID, r.PathValue("par"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	p, err := fs.Leave(detach(r), tenantOf(r), r.PathValue("fid"), r.PathValue("par"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

type postBody struct {
	Author   *string         `json:"author"`
	Text     *string         `json:"text"`
	Metadata json.RawMessage `json:"metadata"`
	Files    []fileBody      `json:"files"`
}

// maxPostText bounds a forum message's text.
const maxPostText = 256 << 10

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	var body postBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	if body.Author == nil || *body.Author == "" {
		return invalid("author is required: the id of a human member")
	}
	if body.Text == nil || strings.TrimSpace(*body.Text) == "" {
		return invalid("text is required and may not be empty")
	}
	if len(*body.Text) > maxPostText {
		return invalid("text is longer than %d bytes", maxPostText)
	}
	meta, err := objectOrEmpty(body.Metadata)
	if err != nil {
		return err
	}
	tenant, fid := tenantOf(r), r.PathValue("fid")
	if _, err := s.forum(r); err != nil {
		return err
	}
	atts, closeFiles, err := s.forumFiles(r, body.Files)
	defer closeFiles()
	if err != nil {
		return err
	}
	post := func(ctx context.Context) (int, []byte, error) {
		// Inline files are stored only for a post that is not a replay,
		// and deleted again if the post is refused.
		stored, made, err := s.storeForumFiles(ctx, tenant, atts)
		if err != nil {
			return 0, nil, err
		}
		m, err := fs.Post(ctx, tenant, fid, *body.Author, *body.Text, meta, stored)
		if err != nil {
			for _, id := range made {
				_ = s.files.DeleteFile(context.WithoutCancel(ctx), tenant, id)
			}
			return 0, nil, err
		}
		b, err := json.Marshal(m)
		return http.StatusCreated, b, err
	}
	q, err := s.newIdemRequest(r, "forum-post:"+fid, &body, idempotencyTTL)
	if err != nil {
		return err
	}
	if q == nil {
		status, b, err := post(detach(r))
		if err != nil {
			return err
		}
		writeRaw(w, status, b)
		return nil
	}
	return s.idempotent(w, r, q, post)
}

func (s *Server) listForumMessages(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	list, next, err := fs.Messages(r.Context(), tenantOf(r), r.PathValue("fid"), opts)
	if err != nil {
		return err
	}
	writeList(w, list, next)
	return nil
}

// forumEvents serves GET /v1/forums/{fid}/events: the forum's stored
// events (a page, or an SSE stream that follows them live with the
// ephemeral forum.typing events).
func (s *Server) forumEvents(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.forums()
	if err != nil {
		return err
	}
	f, err := s.forum(r)
	if err != nil {
		return err
	}
	after, err := eventPosition(r)
	if err != nil {
		return err
	}
	tenant := tenantOf(r)
	if !acceptsSSE(r) {
		limit, err := parseLimit(r.URL.Query(), defaultEventLimit)
		if err != nil {
			return err
		}
		evs, next, err := s.eventPage(r.Context(), tenant, forge.EventQuery{SessionID: f.ID, After: after}, limit)
		if err != nil {
			return err
		}
		writeList(w, evs, next)
		return nil
	}
	if err := s.checkCursor(r.Context(), tenant, f, after); err != nil {
		return err
	}
	release, err := s.streams.open(tenant, f.ID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events, err := fs.Events(ctx, tenant, f.ID, after)
	if err != nil {
		return err
	}
	s.streamEvents(ctx, cancel, w, r, f.ID, "", after, events)
	return nil
}

// forumFiles checks a post's attachments (inline content spooled, not
// stored), as a turn's message's.
func (s *Server) forumFiles(r *http.Request, in []fileBody) ([]forge.InputFile, func(), error) {
	if len(in) == 0 {
		return nil, func() {}, nil
	}
	if s.files == nil {
		return nil, func() {}, forge.Errorf(errNotImplemented, "this server's store keeps no files")
	}
	atts := make([]files.Attachment, len(in))
	for j, f := range in {
		atts[j] = files.Attachment{FileID: f.FileID, Data: f.Data, MimeType: f.MimeType, Filename: f.Filename, URL: f.URL}
	}
	return files.Resolve(atts, tenantOf(r), s.maxFileBytes, "files")
}

// storeForumFiles looks up the files named by id (another tenant's is
// not found) and stores the inline ones; made are the ids it stored.
func (s *Server) storeForumFiles(ctx context.Context, tenant string, in []forge.InputFile) (out []forge.FileData, made []string, err error) {
	defer func() {
		if err != nil {
			for _, id := range made {
				_ = s.files.DeleteFile(context.WithoutCancel(ctx), tenant, id)
			}
		}
	}()
	for _, f := range in {
		var stored *forge.File
		if f.Pending != nil {
			if stored, err = f.Pending.Store(ctx, s.files); err != nil {
				return nil, made, err
			}
			made = append(made, stored.ID)
		} else if stored, err = s.files.GetFile(ctx, tenant, f.FileID); err != nil {
			return nil, made, notFound(err, "file", f.FileID)
		}
		out = append(out, forge.FileData{FileID: stored.ID, Filename: stored.Filename, MimeType: stored.MimeType, Bytes: stored.Bytes})
	}
	return out, made, nil
}
