package postgres

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/forge-runtime/forge/internal/storeutil"
)

// encJSON encodes v as JSON text; a nil pointer, slice or map is NULL, so
// nil and empty values survive a round trip.
func encJSON(v any) (*string, error) {
	s, null, err := storeutil.JSON(v)
	if null || err != nil {
		return nil, dbErr(err)
	}
	return &s, nil
}

// decJSON decodes JSON text into dst; NULL leaves dst untouched.
func decJSON(s *string, dst any) error {
	if s == nil {
		return nil
	}
	if err := json.Unmarshal([]byte(*s), dst); err != nil {
		return fmt.Errorf("postgres: decode %T: %w", dst, err)
	}
	return nil
}

// rawText stores a json.RawMessage verbatim as text (NULL when empty).
func rawText(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

func fromRawText(s *string) json.RawMessage {
	if s == nil {
		return nil
	}
	return json.RawMessage(*s)
}

// nullStr maps "" to NULL, for optional ids and keys.
func nullStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Free text goes to bytea columns as its bytes, whatever they are.

func textBytes(s string) []byte {
	if s == "" {
		return []byte{} // NOT NULL columns: empty, not NULL
	}
	return []byte(s)
}

func optBytes(p *string) []byte {
	if p == nil {
		return nil
	}
	return textBytes(*p)
}

func fromOptBytes(b *[]byte) *string {
	if b == nil {
		return nil
	}
	s := string(*b)
	return &s
}

// utc normalizes a time read from the database.
func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
