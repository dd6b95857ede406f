package storeutil

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/forge-runtime/forge"
)

func TestDBError(t *testing.T) {
	driverErr := errors.New("database is closed")
	notFound := forge.Errorf(forge.ErrNotFound, "session ses_1 not found")
	tests := []struct {
		name      string
		err       error
		wantStore bool
		wantSame  bool // returned as it came
		wantMsg   string
	}{
		{"nil", nil, false, true, ""},
		{"a driver's error", driverErr, true, false, "sqlite: database is closed"},
		{"prefixed once", fmt.Errorf("sqlite: prepare: %w", driverErr), true, false, "sqlite: prepare: database is closed"},
		{"no rows is still the driver's", sql.ErrNoRows, true, false, "sqlite: sql: no rows in result set"},
		{"an answer about the data", notFound, false, true, "session ses_1 not found"},
		{"already a store failure", fmt.Errorf("hold: %w", forge.ErrStore), true, true, "hold: store_error"},
		{"the caller's cancel", fmt.Errorf("query: %w", context.Canceled), false, true, "query: context canceled"},
		{"the caller's deadline", context.DeadlineExceeded, false, true, "context deadline exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DBError("sqlite", tc.err)
			if errors.Is(got, forge.ErrStore) != tc.wantStore {
				t.Errorf("errors.Is(%v, ErrStore) = %v, want %v", got, !tc.wantStore, tc.wantStore)
			}
			if tc.wantSame && got != tc.err {
				t.Errorf("got %#v, want the error unchanged", got)
			}
			if tc.err != nil && !errors.Is(got, tc.err) {
				t.Errorf("%v does not unwrap to %v", got, tc.err)
			}
			if got != nil && got.Error() != tc.wantMsg {
				t.Errorf("message %q, want %q", got.Error(), tc.wantMsg)
			}
		})
	}
}
