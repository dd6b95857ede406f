package storeutil

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/forge-runtime/forge"
)

// NewSession checks a session about to be created and returns it with its
// defaults: an id, the direct kind, created now, updated when created.
func NewSession(s *forge.Session, ids forge.IDGen, now func() time.Time) (forge.Session, error) {
	if s == nil {
		return forge.Session{}, forge.Errorf(forge.ErrInvalid, "session is required")
	}
	c := *s
	if c.ID == "" {
		c.ID = ids.New(forge.PrefixSession)
	}
	if c.Kind == "" {
		c.Kind = forge.KindDirect
	}
	c.CreatedAt = OrNow(c.CreatedAt, now)
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = c.CreatedAt
	}
	return c, nil
}

// Monologue returns a monologue session created with a stint or a swap:
// created now unless set, updated when created.
func Monologue(m forge.Session, now func() time.Time) forge.Session {
	m.CreatedAt = OrNow(m.CreatedAt, now)
	m.UpdatedAt = m.CreatedAt
	return m
}

// CheckReserve checks the count of a ReserveSeqs.
func CheckReserve(n int64) error {
	if n < 0 {
		return forge.Errorf(forge.ErrInvalid, "cannot reserve %d seqs", n)
	}
	return nil
}

// CheckAgent checks an agent about to be created or updated.
func CheckAgent(a *forge.Agent) error {
	if a == nil || a.Name == "" {
		return forge.Errorf(forge.ErrInvalid, "agent name is required")
	}
	return nil
}

// NewAgent checks an agent about to be created and returns its version 1:
// a new id, created and updated now.
func NewAgent(a *forge.Agent, ids forge.IDGen, now time.Time) (forge.Agent, error) {
	if err := CheckAgent(a); err != nil {
		return forge.Agent{}, err
	}
	c := *a
	c.ID = ids.New(forge.PrefixAgent)
	c.Version = 1
	c.CreatedAt, c.UpdatedAt = now, now
	return c, nil
}

// Agent is an agent read back: its version's stored definition (JSON),
// with the identity the rows hold.
func Agent(body []byte, id, tenant, name string, version int, created, updated time.Time) (*forge.Agent, error) {
	a := &forge.Agent{}
	if err := json.Unmarshal(body, a); err != nil {
		return nil, fmt.Errorf("decode agent %s v%d: %w", id, version, err)
	}
	a.ID, a.Tenant, a.Name, a.Version = id, tenant, name, version
	a.CreatedAt, a.UpdatedAt = created, updated
	return a, nil
}

// NewKey checks the tenant and name of a key about to be created and makes
// it: the key (a new id, created now), its secret and the hash a store
// keeps of the secret.
func NewKey(ids forge.IDGen, now time.Time, tenant, name string) (k *forge.APIKey, secret string, hash []byte, err error) {
	if err := forge.ValidateNewKey(tenant, name); err != nil {
		return nil, "", nil, err
	}
	secret, err = forge.NewAPIKeySecret()
	if err != nil {
		return nil, "", nil, err
	}
	k = &forge.APIKey{ID: ids.New(forge.PrefixKey), Tenant: tenant, Name: name, CreatedAt: now}
	return k, secret, forge.HashAPIKey(secret), nil
}

// CheckIdempotency checks a record about to be put.
func CheckIdempotency(r *forge.IdempotencyRecord) error {
	if r == nil || r.Key == "" {
		return forge.Errorf(forge.ErrInvalid, "idempotency key is required")
	}
	return nil
}

// CheckCompletion checks the answer a CompleteIdempotency records.
func CheckCompletion(status int) error {
	if status == 0 {
		return forge.Errorf(forge.ErrInvalid, "an idempotent answer needs a status")
	}
	return nil
}

// CheckMessage checks a message about to be written.
func CheckMessage(m *forge.Message) error {
	if m == nil || m.ID == "" {
		return forge.Errorf(forge.ErrInvalid, "message id is required")
	}
	return nil
}

// PartMessage checks a part about to be written and returns the id of its
// message: messageID when set, else the part's own.
func PartMessage(p *forge.Part, messageID string) (string, error) {
	if p == nil || p.ID == "" {
		return "", forge.Errorf(forge.ErrInvalid, "part id is required")
	}
	mid := p.MessageID
	if messageID != "" {
		mid = messageID
	}
	if mid == "" {
		return "", forge.Errorf(forge.ErrInvalid, "part %s has no message id", p.ID)
	}
	return mid, nil
}

// CheckEvent checks an event about to be stored.
func CheckEvent(e *forge.Event) error {
	if e.Seq <= 0 || e.Type == "" {
		return forge.Errorf(forge.ErrInvalid, "event needs a positive seq and a type (seq %d, type %q)", e.Seq, e.Type)
	}
	return nil
}

// Boundary is the compaction boundary read back: the summary, its request
// and the data of the request's compaction part (nil when it has none).
// Without a tail the view starts at the request.
func Boundary(requestID, summaryID string, data []byte) (*forge.CompactionBoundary, error) {
	var cd forge.CompactionData
	if data != nil {
		if err := json.Unmarshal(data, &cd); err != nil {
			return nil, fmt.Errorf("compaction part of %s: %w", requestID, err)
		}
	}
	if cd.TailStartID == "" {
		cd.TailStartID = requestID
	}
	return &forge.CompactionBoundary{RequestID: requestID, SummaryID: summaryID, TailStartID: cd.TailStartID}, nil
}

// SessionTTL is the agent's session TTL as stored beside its definition
// (nanoseconds), or nil when the agent has none.
func SessionTTL(a *forge.Agent) *int64 {
	if a.Retention == nil || a.Retention.SessionTTL == 0 {
		return nil
	}
	n := int64(a.Retention.SessionTTL)
	return &n
}
