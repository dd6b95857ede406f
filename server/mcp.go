package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/mcp"
	"github.com/forge-runtime/forge/provider"
)

// mcpOptions builds the MCP manager's policy from forge.yaml's mcp section
// (cfg may be nil) and the flags, and logs it. keyless reports whether the
// server still has no API key.
func mcpOptions(cfg *provider.Config, o Config, launcher mcp.Launcher, keyless func(context.Context) bool,
	getenv func(string) string, log *slog.Logger) (mcp.Options, error) {
	opts := mcp.Options{Logger: log, Launcher: launcher}
	var mc provider.MCPConfig
	if cfg != nil {
		mc = cfg.MCP
	}
	for i := range mc.Commands {
		c := &mc.Commands[i]
		env, err := c.ExpandEnv(getenv)
		if err != nil {
			return opts, fmt.Errorf("%s: %w", cfg.Path, err)
		}
		opts.Commands = append(opts.Commands, mcp.AllowedCommand{
			Name: c.Name, Command: c.Command, Prefix: c.Prefix, Env: env,
			Host: c.OnHost(), TenantEnv: c.TenantEnv, Dir: c.Dir,
		})
		if c.OnHost() {
			log.Warn("mcp: operator command runs on the host, unsandboxed, as the server's user", "command", c.Name,
				"argv", strings.Join(c.Command, " "), "prefix", c.Prefix)
		} else {
			log.Info("mcp: operator command (sandboxed)", "command", c.Name, "argv", strings.Join(c.Command, " "), "prefix", c.Prefix)
		}
	}
	opts.OnlyAllowedCommands = mc.OtherCommands == provider.OtherCommandsRefuse
	switch {
	case opts.OnlyAllowedCommands:
		log.Info("mcp: agents' stdio servers are refused unless forge.yaml lists them (mcp.other_commands: refuse)")
	case launcher == nil || !launcher.Isolated():
		log.Warn("mcp: agents' stdio servers are refused: they run only in the sandbox, and bubblewrap isolation is not available " +
			"(--unsafe-unsandboxed-commands does not apply to them; forge.yaml mcp.commands can allow some on the host)")
	default:
		log.Info("mcp: agents' stdio servers run in their session's sandbox")
	}

	privateFrom := "default"
	switch {
	case o.AllowPrivateMCPURLs != nil:
		opts.Network.AllowPrivate = *o.AllowPrivateMCPURLs
		privateFrom = "--allow-private-mcp-urls"
	case mc.AllowPrivateURLs != nil:
		opts.Network.AllowPrivate = *mc.AllowPrivateURLs
		privateFrom = "forge.yaml mcp.allow_private_urls"
	default:
		opts.Network.PrivateAllowed = keyless
	}
	switch {
	case o.AllowLinkLocalMCPURLs != nil:
		opts.Network.AllowLinkLocal = *o.AllowLinkLocalMCPURLs
	case mc.AllowLinkLocalURLs != nil:
		opts.Network.AllowLinkLocal = *mc.AllowLinkLocalURLs
	}
	allowed := map[bool]string{true: "allowed", false: "refused"}
	private := allowed[opts.Network.AllowPrivate]
	if opts.Network.PrivateAllowed != nil {
		private = "allowed while the server has no API key"
	}
	log.Info("mcp: addresses agents' url servers may reach: public ones", "private", private, "private_set_by", privateFrom,
		"link_local_and_metadata", allowed[opts.Network.AllowLinkLocal])
	return opts, nil
}

// keylessCheck reports whether the server has no API key: none given to
// it and none in the store. It asks the store at most once a second; once
// keys exist it answers false for good (as the HTTP layer, which then
// requires them).
type keylessCheck struct {
	static bool // keys were given to the server
	keys   forge.KeyStore
	clock  forge.Clock
	log    *slog.Logger

	mu      sync.Mutex // guards the following
	keyed   bool
	checked time.Time
}

func (k *keylessCheck) keyless(ctx context.Context) bool {
	if k.static {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock.Now()
	if k.keyed || (!k.checked.IsZero() && now.Sub(k.checked) < time.Second) {
		return !k.keyed
	}
	has, err := k.keys.HasKeys(ctx)
	if err != nil {
		// Unknown: refuse what only a keyless server allows.
		k.log.Warn("mcp: could not tell whether API keys exist; refusing private addresses", "err", err)
		return false
	}
	k.keyed, k.checked = has, now
	return !has
}

// checkReadOnlyPaths refuses read-only sandbox paths that would show a
// sandbox the database or the other sessions' sandboxes.
func checkReadOnlyPaths(paths []string, db, sandboxRoot string) error {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		if r, err := filepath.EvalSymlinks(a); err == nil {
			return r
		}
		return a
	}
	within := func(p, dir string) bool {
		rel, err := filepath.Rel(dir, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(os.PathSeparator))
	}
	root := abs(sandboxRoot)
	for _, p := range paths {
		rp := abs(p)
		if within(root, rp) || within(rp, root) {
			return fmt.Errorf("sandbox.read_only_paths: %s overlaps the sandbox root %s: every session would see the others' sandboxes", p, root)
		}
		if !IsPostgres(db) && within(abs(db), rp) {
			return fmt.Errorf("sandbox.read_only_paths: %s holds the database %s: every session could read it", p, db)
		}
	}
	return nil
}
