package forge_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
)

// TestEverySentinelHasACode: every Err* variable the package declares is
// in the table of error codes, so the API never answers "internal" for an
// error it knows.
func TestEverySentinelHasACode(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for _, id := range vs.Names {
				if strings.HasPrefix(id.Name, "Err") {
					names = append(names, id.Name)
				}
			}
		}
		return true
	})
	byName := map[string]error{
		"ErrInvalid": forge.ErrInvalid, "ErrUnauthorized": forge.ErrUnauthorized, "ErrForbidden": forge.ErrForbidden,
		"ErrNotFound": forge.ErrNotFound, "ErrTurnInProgress": forge.ErrTurnInProgress, "ErrPendingActions": forge.ErrPendingActions,
		"ErrUnknownCall": forge.ErrUnknownCall, "ErrDuplicateCall": forge.ErrDuplicateCall,
		"ErrIncompleteResolution": forge.ErrIncompleteResolution, "ErrConflict": forge.ErrConflict,
		"ErrTooLarge": forge.ErrTooLarge, "ErrUnsupportedMediaType": forge.ErrUnsupportedMediaType,
		"ErrUnsupportedContent":  forge.ErrUnsupportedContent,
		"ErrIdempotencyMismatch": forge.ErrIdempotencyMismatch, "ErrStore": forge.ErrStore, "ErrUnavailable": forge.ErrUnavailable,
		"ErrTurnEnded": forge.ErrTurnEnded, "ErrLocked": forge.ErrLocked,
		"ErrRateLimited": forge.ErrRateLimited, "ErrTooManySubscribers": forge.ErrTooManySubscribers,
		"ErrSnapshotNotFound": forge.ErrSnapshotNotFound,
	}
	if len(names) < len(byName) {
		t.Fatalf("found %d sentinels in errors.go: %v", len(names), names)
	}
	for _, name := range names {
		sentinel, ok := byName[name]
		if !ok {
			t.Errorf("sentinel %s is new: add it to errorKinds and to this test", name)
			continue
		}
		code := forge.ErrorCode(sentinel)
		if code == forge.CodeInternal || code == "" {
			t.Errorf("%s has no API code", name)
		}
		wrapped := forge.Errorf(sentinel, "with a sentence")
		if forge.ErrorCode(wrapped) != code || !errors.Is(forge.ErrorSentinel(wrapped), sentinel) {
			t.Errorf("%s wrapped: code %q, sentinel %v", name, forge.ErrorCode(wrapped), forge.ErrorSentinel(wrapped))
		}
		if own := forge.ErrorForCode(code); own == nil || forge.ErrorCode(own) != code {
			t.Errorf("%s: code %q maps back to %v", name, code, own)
		}
	}
	if forge.ErrorCode(errors.New("x")) != forge.CodeInternal || forge.ErrorForCode("nope") != nil {
		t.Error("an unknown error or code")
	}
}
