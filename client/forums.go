package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"

	"github.com/forge-runtime/forge"
)

// Forum is a forum as the API shows it.
type Forum struct {
	ID        string            `json:"id"`
	Kind      string            `json:"kind"`
	Title     string            `json:"title"`
	Metadata  json.RawMessage   `json:"metadata"`
	Guards    forge.ForumGuards `json:"guards"`
	CreatedAt string            `json:"created_at"`
}

// CreateForumRequest is the body of POST /v1/forums. Guards nil means the
// defaults.
type CreateForumRequest struct {
	Title    string             `json:"title,omitempty"`
	Metadata json.RawMessage    `json:"metadata,omitempty"`
	Guards   *forge.ForumGuards `json:"guards,omitempty"`
}

// CreateForum creates a forum.
func (c *Client) CreateForum(ctx context.Context, req CreateForumRequest) (*Forum, error) {
	var out Forum
	if _, err := c.do(ctx, http.MethodPost, "/v1/forums", nil, req, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetForum returns a forum.
func (c *Client) GetForum(ctx context.Context, id string) (*Forum, error) {
	var out Forum
	if _, err := c.do(ctx, http.MethodGet, "/v1/forums/"+seg(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListForums returns a page of forums.
func (c *Client) ListForums(ctx context.Context, opts ListOptions) (*Page[Forum], error) {
	return list[Forum](ctx, c, "/v1/forums", opts.query(nil))
}

// DeleteForum deletes a forum, ending every stint.
func (c *Client) DeleteForum(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/forums/"+seg(id), nil, nil, nil, nil)
	return err
}

// AddHuman adds a human member.
func (c *Client) AddHuman(ctx context.Context, forumID, humanID string) (*forge.Participant, error) {
	return c.addMember(ctx, forumID, map[string]any{"actor": forge.Actor{Type: forge.ActorHuman, ID: humanID}})
}

// AddAgent adds an agent member with a trigger policy ("" means auto).
func (c *Client) AddAgent(ctx context.Context, forumID, agent, trigger string) (*forge.Participant, error) {
	body := map[string]any{"actor": forge.Actor{Type: forge.ActorAgent, Agent: agent}}
	if trigger != "" {
		body["trigger"] = trigger
	}
	return c.addMember(ctx, forumID, body)
}

func (c *Client) addMember(ctx context.Context, forumID string, body any) (*forge.Participant, error) {
	var out forge.Participant
	if _, err := c.do(ctx, http.MethodPost, "/v1/forums/"+seg(forumID)+"/members", nil, body, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListMembers returns a page of a forum's stints: the active ones, or all.
func (c *Client) ListMembers(ctx context.Context, forumID string, all bool, opts ListOptions) (*Page[forge.Participant], error) {
	q := opts.query(nil)
	if all {
		q.Set("all", "true")
	}
	return list[forge.Participant](ctx, c, "/v1/forums/"+seg(forumID)+"/members", q)
}

// RemoveMember ends a stint (idempotent).
func (c *Client) RemoveMember(ctx context.Context, forumID, participantID string) (*forge.Participant, error) {
	var out forge.Participant
	if _, err := c.do(ctx, http.MethodDelete, "/v1/forums/"+seg(forumID)+"/members/"+seg(participantID), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PostRequest is the body of POST /v1/forums/{id}/messages.
type PostRequest struct {
	Author   string          `json:"author"`
	Text     string          `json:"text"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Files attach stored files (by FileID, from UploadFile).
	Files []forge.InputFile `json:"files,omitempty"`
	// IdempotencyKey makes a retry return the first answer; "" makes one
	// up, so the client's own retries never post twice.
	IdempotencyKey string `json:"-"`
}

// Post posts a human member's message.
func (c *Client) Post(ctx context.Context, forumID string, req PostRequest) (*forge.ForumMessage, error) {
	key := req.IdempotencyKey
	if key == "" {
		key = newIdempotencyKey()
	}
	var out forge.ForumMessage
	if _, err := c.do(ctx, http.MethodPost, "/v1/forums/"+seg(forumID)+"/messages", nil, req, idemHeader(key), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListForumMessages returns a page of a forum's messages, oldest first.
func (c *Client) ListForumMessages(ctx context.Context, forumID string, opts ListOptions) (*Page[forge.ForumMessage], error) {
	return list[forge.ForumMessage](ctx, c, "/v1/forums/"+seg(forumID)+"/messages", opts.query(nil))
}

// ForumEvents follows a forum's events after a seq (0: from the start),
// reconnecting with Last-Event-ID; forum.typing events (Seq 0) pass
// through live and are never replayed.
func (c *Client) ForumEvents(ctx context.Context, forumID string, after int64) iter.Seq2[forge.Event, error] {
	s := &stream{c: c, sessionID: forumID, path: "/v1/forums/" + seg(forumID) + "/events", last: after}
	return s.run(ctx)
}
