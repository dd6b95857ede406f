package forge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// APIKey is a stored API key: everything but its secret, which exists only
// in the answer to CreateKey. The store keeps the secret's SHA-256.
type APIKey struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// AllTenants, passed as the tenant of ListKeys or RevokeKey, means every
// tenant (an operator's view; a store may refuse it to a role that should
// not see across tenants).
const AllTenants = "*"

// KeyStore keeps API keys, so that every server sharing the store accepts
// a new key, and refuses a revoked one, at once.
type KeyStore interface {
	// CreateKey makes a key for tenant and returns it with its secret, the
	// only time the secret is seen: the store keeps its hash.
	CreateKey(ctx context.Context, tenant, name string) (*APIKey, string, error)
	// ListKeys lists keys (revoked ones too) oldest first.
	ListKeys(ctx context.Context, tenant string, opts ListOptions) ([]*APIKey, string, error)
	// RevokeKey revokes a key of tenant; ErrNotFound when tenant has no key
	// with that id. Revoking a revoked key changes nothing.
	RevokeKey(ctx context.Context, tenant, id string) error
	// KeyByHash returns the live key whose secret hashes (HashAPIKey) to
	// hash, whatever its tenant; ErrNotFound when there is none.
	KeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	// HasKeys reports whether any tenant has a live key.
	HasKeys(ctx context.Context) (bool, error)
}

// Key secrets are "fk_" and 32 random bytes in unpadded base64url: only
// [A-Za-z0-9_-], easy to spot in a leaked file.
const (
	APIKeyPrefix    = "fk_"
	apiKeyRandomLen = 32
)

// NewAPIKeySecret returns a new random key secret.
func NewAPIKeySecret() (string, error) {
	b := make([]byte, apiKeyRandomLen)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return APIKeyPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// HashAPIKey is what a store keeps of a key secret. A plain SHA-256 is
// enough: the secret has 256 random bits, so there is nothing for a slow
// password hash to protect against (no dictionary, no feasible brute
// force), and a lookup costs one hash per request.
func HashAPIKey(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

var tenantRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidTenant checks a tenant name given by an operator: 1-64 letters,
// digits, '_', '-' or '.', starting with a letter or digit.
func ValidTenant(tenant string) error {
	if !tenantRE.MatchString(tenant) {
		return Errorf(ErrInvalid, "tenant %q must be 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit", tenant)
	}
	return nil
}

// ValidateNewKey checks the tenant and name of a key about to be created;
// the name, a note for operators, is at most 128 bytes of printable UTF-8.
func ValidateNewKey(tenant, name string) error {
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	if len(name) > 128 || !utf8.ValidString(name) || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return Errorf(ErrInvalid, "key name must be at most 128 bytes of printable UTF-8")
	}
	return nil
}
