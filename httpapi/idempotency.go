package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/forge-runtime/forge"
)

// idempotencyTTL is how long a key stays bound to its first request and
// answer (API.md: 24 h), for answers that are stored whole. A turn's key
// stays bound for good: the engine keeps it on the turn.
const idempotencyTTL = 24 * time.Hour

// idemRequest is a request made with an Idempotency-Key.
type idemRequest struct {
	tenant string
	scope  string // where the key lives: a key is one request per scope
	key    string
	hash   string // of the request: method, path and canonical body
	ttl    time.Duration
}

// newIdemRequest returns r as an idempotent request in scope, nil when it
// has no Idempotency-Key. body is r's decoded body: its canonical form (as
// encoding/json writes it back) is what is hashed, so spacing, field order
// and explicit nulls do not make another request. ttl 0 binds the key for
// good.
func (s *Server) newIdemRequest(r *http.Request, scope string, body any, ttl time.Duration) (*idemRequest, error) {
	key, err := idempotencyKey(r)
	if err != nil || key == "" {
		return nil, err
	}
	canonical, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(r.Method), []byte(r.URL.Path), canonical} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return &idemRequest{tenant: tenantOf(r), scope: scope, key: key, hash: hex.EncodeToString(h.Sum(nil)), ttl: ttl}, nil
}

// begin binds the key to q, or finds what it is bound to. It returns the
// key's record, with Status 0 when no answer is recorded yet (q is the
// first request, or an earlier one ended without an answer to remember:
// the caller acts, then calls complete), and holds the key in this process
// until unlock: concurrent requests with one key wait for the first one's
// answer. A key bound to another request is idempotency_mismatch.
func (s *Server) begin(ctx context.Context, q *idemRequest) (rec *forge.IdempotencyRecord, unlock func(), err error) {
	unlock = s.locks.lock(q.tenant + "\x00" + q.scope + "\x00" + q.key)
	now := s.clock.Now()
	mine := &forge.IdempotencyRecord{Key: q.key, Scope: q.scope, RequestHash: q.hash, CreatedAt: now}
	if q.ttl > 0 {
		mine.ExpiresAt = now.Add(q.ttl)
	}
	rec, err = s.store.PutIdempotency(ctx, q.tenant, mine)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	if rec.RequestHash != "" && rec.RequestHash != q.hash {
		unlock()
		return nil, nil, forge.Errorf(forge.ErrIdempotencyMismatch,
			"Idempotency-Key %q was first used with another request (another body or endpoint): use a new key for a new request", q.key)
	}
	return rec, unlock, nil
}

// complete records the answer to q and returns the key's record: the one
// just written, or the answer another process recorded first.
func (s *Server) complete(ctx context.Context, q *idemRequest, status int, body []byte) (*forge.IdempotencyRecord, error) {
	return s.store.CompleteIdempotency(ctx, q.tenant, q.scope, q.key, status, body)
}

// idempotent answers q with the key's recorded answer, or runs act and
// records its answer. act returns the answer's status and JSON body; an
// error from act is answered but not recorded (the request may be retried
// with the same key).
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, q *idemRequest, act func(ctx context.Context) (int, []byte, error)) error {
	ctx := detach(r)
	rec, unlock, err := s.begin(ctx, q)
	if err != nil {
		return err
	}
	defer unlock()
	if rec.Status != 0 {
		replay(w, rec)
		return nil
	}
	status, answer, err := act(ctx)
	if err != nil {
		return err
	}
	rec, err = s.complete(ctx, q, status, answer)
	switch {
	case err != nil:
		s.log.Warn("storing an idempotent answer failed", "scope", q.scope, "err", err)
	case rec.Status != status || !bytes.Equal(rec.Body, answer):
		replay(w, rec) // another process answered first
		return nil
	}
	writeRaw(w, status, answer)
	return nil
}

// replay answers a recorded answer.
func replay(w http.ResponseWriter, rec *forge.IdempotencyRecord) {
	w.Header().Set("Idempotent-Replayed", "true")
	writeRaw(w, rec.Status, rec.Body)
}
