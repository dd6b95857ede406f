package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/forge-runtime/forge/internal/storeutil"
)

// Times are stored as Unix nanoseconds: exact, compact and cheap to compare.

func unixNano(t time.Time) int64 { return t.UnixNano() }

func fromNano(n int64) time.Time { return time.Unix(0, n).UTC() }

func nullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

func fromNullNano(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNano(n.Int64)
	return &t
}

// encJSON encodes v as JSON text; a nil pointer, slice or map is NULL, so
// nil and empty values survive a round trip.
func encJSON(v any) (any, error) {
	s, null, err := storeutil.JSON(v)
	if null || err != nil {
		return nil, dbErr(err)
	}
	return s, nil
}

// decJSON decodes JSON text into dst; NULL leaves dst untouched.
func decJSON(s sql.NullString, dst any) error {
	if !s.Valid {
		return nil
	}
	if err := json.Unmarshal([]byte(s.String), dst); err != nil {
		return fmt.Errorf("sqlite: decode %T: %w", dst, err)
	}
	return nil
}

// rawText stores a json.RawMessage verbatim as TEXT (NULL when empty).
func rawText(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

func fromRawText(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}

// nullStr maps "" to NULL, for optional ids and keys.
func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func strPtr(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

func fromNullStr(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	v := s.String
	return &v
}
