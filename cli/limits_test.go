package cli

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestOperatorKeyIsChecked: forge serve refuses a short operator key and
// one that is also a tenant's key, before it opens anything.
func TestOperatorKeyIsChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		o    serveOptions
		want string
	}{
		{serveOptions{operatorKey: "short"}, "at least 16 characters"},
		{serveOptions{operatorKey: "has a space in it, long"}, "without spaces"},
		{serveOptions{operatorKey: "the-same-key-0123456", apiKeys: "the-same-key-0123456=acme"}, "also a tenant's API key"},
	} {
		c.o.addr, c.o.db, c.o.logLevel, c.o.logOut = "127.0.0.1:0", filepath.Join(dir, "forge.db"), "error", io.Discard
		if err := serve(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.o.operatorKey, err, c.want)
		}
	}
}
