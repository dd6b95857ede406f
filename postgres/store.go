// Package postgres is the PostgreSQL implementation of forge.Store and
// forge.KeyStore (pgx/v5), for production and for several replicas sharing
// one database.
//
// Tenant isolation is enforced by the database: every tenant table has
// row-level security, forced, with a policy admitting only the rows of the
// tenant each transaction sets (set_config('forge.tenant', $1, true)), and
// every query runs as a role that cannot bypass it (roles.go). A query that
// forgets its tenant filter still sees nothing of another tenant.
//
// Each store call is one pgx.Batch: the tenant setting and every statement
// of the call go to the server together and run in one implicit
// transaction, so a call costs one round trip (two for RunningTurns), and
// a statement that fails, or a check that raises (fenced,
// begin_turn_check), rolls back the whole call.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
)

var (
	_ forge.Store    = (*Store)(nil)
	_ forge.KeyStore = (*Store)(nil)
)

// Options tune a Store. Zero fields take the defaults below; pool settings
// given in the URL (pool_max_conns=...) win over the defaults but not over
// non-zero fields here.
type Options struct {
	// MaxConns caps the pool (default 10). Store calls are short
	// transactions of one round trip, so a few connections serve many
	// concurrent turns; keep replicas × MaxConns under the server's
	// max_connections (100 by default).
	MaxConns int32
	// MinIdleConns are kept open while idle (default 1), so the first call
	// after a quiet spell does not pay for a connection.
	MinIdleConns int32
	// MaxConnLifetime closes connections this old (default 30 min, with up
	// to 5 min of jitter), so a pool follows a failover or a new replica
	// behind a DNS name.
	MaxConnLifetime time.Duration
	// MaxConnIdleTime closes connections idle this long (default 5 min).
	MaxConnIdleTime time.Duration
	// RolePrefix names Forge's roles: <prefix>_owner, <prefix>_runtime,
	// <prefix>_lookup (default "forge"). A database keeps the prefix it was
	// created with.
	RolePrefix string

	// dial, when set, replaces the pool's dialer (tests count round trips).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// noPacker leaves ended turns' logs unpacked until FlushEventLog
	// (tests of what the packer does).
	noPacker bool
}

// Pool defaults (see Options).
const (
	DefaultMaxConns        = 10
	DefaultMinIdleConns    = 1
	DefaultMaxConnLifetime = 30 * time.Minute
	DefaultMaxConnIdleTime = 5 * time.Minute
	defaultLifetimeJitter  = 5 * time.Minute
)

// schema holds every Forge object; connections put it alone on their
// search_path.
const schema = "forge"

// Store is a forge.Store on a PostgreSQL database.
type Store struct {
	pool  *pgxpool.Pool
	roles roles
	// admin is true when Forge was given a superuser (or CREATEROLE) URL:
	// connections then SET ROLE to the runtime role, and operator calls
	// across tenants (keys) may SET LOCAL ROLE to the owner.
	admin bool
	ids   forge.IDGen
	now   func() time.Time
	// writes times each write for ObserveWrites.
	writes storeutil.WriteTimer
	// pk packs the logs of ended turns (events.go); dicts keeps the
	// dictionaries of packed turns' rows for replays.
	pk    *eventpack.Packer
	dicts *eventpack.DictCache
	// cache keeps the session and agent rows turns begin from (cache.go).
	cache *turnCache
	// checkpoints groups the checkpoints of streaming text (checkpoints.go).
	checkpoints checkpointGroups
	// onDeliveries is called after a write that queued a webhook
	// delivery (NotifyDeliveries).
	onDeliveries atomic.Pointer[func()]

	closeOnce sync.Once
}

// Open connects to the database at rawURL (postgres://...), creates
// Forge's roles and schema and applies pending migrations when its role may
// (a superuser, or a role with CREATEROLE), and opens the pool. Every query
// of the store runs as a role without BYPASSRLS: the runtime role (SET
// ROLE) for an administrator's URL, else the URL's own role, which Open refuses
// if it bypasses row-level security or could become the owner.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	r, err := newRoles(opts.RolePrefix)
	if err != nil {
		return nil, err
	}
	cfg, err := poolConfig(rawURL, opts)
	if err != nil {
		return nil, err
	}
	admin, err := prepare(ctx, cfg.ConnConfig.Copy(), r)
	if err != nil {
		return nil, err
	}
	if admin {
		runtime := r.runtime
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET ROLE "+runtime)
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{
		pool:  pool,
		roles: r,
		admin: admin,
		ids:   forge.NewULIDGen(nil),
		now:   func() time.Time { return time.Now().UTC() },
		cache: newTurnCache(),
	}
	if err := s.checkQueryRole(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	s.dicts = eventpack.NewDictCache(dictCacheBytes)
	s.pk = eventpack.NewPacker(packWork{s}, eventpack.PackDelay, !opts.noPacker)
	return s, nil
}

// poolConfig parses url and applies opts and the defaults.
func poolConfig(rawURL string, opts Options) (*pgxpool.Config, error) {
	if !strings.HasPrefix(rawURL, "postgres://") && !strings.HasPrefix(rawURL, "postgresql://") {
		return nil, fmt.Errorf("postgres: the database URL must start with postgres:// or postgresql://")
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: bad database URL: %w", redactErr(err, rawURL))
	}
	given := map[string]bool{}
	if u, err := url.Parse(rawURL); err == nil {
		for k := range u.Query() {
			given[k] = true
		}
	}
	if !given["pool_max_conns"] {
		cfg.MaxConns = DefaultMaxConns
	}
	if !given["pool_min_idle_conns"] {
		cfg.MinIdleConns = DefaultMinIdleConns
	}
	if !given["pool_max_conn_lifetime"] {
		cfg.MaxConnLifetime = DefaultMaxConnLifetime
	}
	if !given["pool_max_conn_lifetime_jitter"] {
		cfg.MaxConnLifetimeJitter = defaultLifetimeJitter
	}
	if !given["pool_max_conn_idle_time"] {
		cfg.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if opts.MinIdleConns > 0 {
		cfg.MinIdleConns = opts.MinIdleConns
	}
	if opts.MaxConnLifetime > 0 {
		cfg.MaxConnLifetime = opts.MaxConnLifetime
	}
	if opts.MaxConnIdleTime > 0 {
		cfg.MaxConnIdleTime = opts.MaxConnIdleTime
	}
	cfg.MinIdleConns = min(cfg.MinIdleConns, cfg.MaxConns)
	if opts.dial != nil {
		cfg.ConnConfig.DialFunc = opts.dial
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "forge"
	}
	return cfg, nil
}

// redactErr keeps a password out of an error that quotes the URL.
func redactErr(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return err
	}
	if p, ok := u.User.Password(); ok && p != "" && strings.Contains(err.Error(), p) {
		return errors.New(strings.ReplaceAll(err.Error(), p, "xxxxx"))
	}
	return err
}

// checkQueryRole makes sure the pool's connections query as a role that
// row-level security applies to.
func (s *Store) checkQueryRole(ctx context.Context) error {
	var (
		user          string
		super, bypass bool
	)
	err := s.pool.QueryRow(ctx, `SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).
		Scan(&user, &super, &bypass)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if super || bypass {
		return fmt.Errorf("postgres: queries would run as %s, which bypasses row-level security", user)
	}
	return nil
}

// Close closes the pool. It may be called more than once.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		// The packer drains first: it needs the pool.
		s.pk.Stop()
		s.pool.Close()
	})
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return dbErr(err)
	}
	return nil
}

// setTenant makes tenant the one the row-level security policies admit,
// until the end of the (implicit) transaction.
const setTenant = `SELECT set_config('forge.tenant', $1, true)`

// batch starts a batch whose statements run for tenant.
func batch(tenant string) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(setTenant, tenant)
	return b
}

// read sends b, calls the callbacks queued with its statements in order,
// and returns the first error, mapped to forge's sentinels. All of b runs
// in one transaction: an error in any statement undoes every one.
func (s *Store) read(ctx context.Context, b *pgx.Batch) error {
	return dbErr(s.pool.SendBatch(ctx, b).Close())
}

// writeTimeout bounds a write its caller can no longer interrupt.
const writeTimeout = time.Minute

// write is read for a batch that writes. ctx can abandon it while it waits
// for a connection, not once it is sent: then its outcome, committed or
// not, is what the caller learns (an interrupted round trip would leave
// the caller not knowing whether the write landed).
func (s *Store) write(ctx context.Context, b *pgx.Batch) error {
	return s.writes.Time(func() error { return s.writeNow(ctx, b) })
}

// ObserveWrites makes every write call f with how long it took, from the
// call to its answer (waiting for a connection included), and its error.
// nil stops it. f runs on the caller's goroutine and must return quickly.
func (s *Store) ObserveWrites(f func(d time.Duration, err error)) { s.writes.Set(f) }

func (s *Store) writeNow(ctx context.Context, b *pgx.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return dbErr(err)
	}
	defer conn.Release()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	return dbErr(conn.SendBatch(wctx, b).Close())
}

// Forge's own SQLSTATEs, raised by the functions of 0001_init.sql.
const (
	codeTurnEnded      = "FG001"
	codeNotFound       = "FG002"
	codeConflict       = "FG003"
	codeTurnInProgress = "FG004"
	codeInvalid        = "FG005"
	codeAgentChanged   = "FG006" // 0016_agent_is_current.sql
	codeSeqClaimLost   = "FG007" // 0019_claim_seqs.sql
)

// dbErr maps database errors to forge's sentinels where callers branch on
// them; the rest are failures of the store (storeutil.DBError: ErrStore).
func dbErr(err error) error {
	if err == nil || isForgeErr(err) {
		return err
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return storeutil.DBError("postgres", err)
	}
	switch pe.Code {
	case codeTurnEnded:
		return forge.Errorf(forge.ErrTurnEnded, "%s", pe.Message)
	case codeNotFound:
		return forge.Errorf(forge.ErrNotFound, "%s", pe.Message)
	case codeConflict:
		return forge.Errorf(forge.ErrConflict, "%s", pe.Message)
	case codeAgentChanged:
		return agentChanged{forge.Errorf(forge.ErrConflict, "%s", pe.Message)}
	case codeSeqClaimLost:
		return fmt.Errorf("%w: %s", forge.ErrSeqClaimLost, pe.Message)
	case codeTurnInProgress:
		return forge.Errorf(forge.ErrTurnInProgress, "%s", pe.Message)
	case codeInvalid:
		return forge.Errorf(forge.ErrInvalid, "%s", pe.Message)
	case "23505": // unique_violation
		return uniqueErr(pe)
	case "22021", "22P05": // character_not_in_repertoire, untranslatable_character
		return forge.Errorf(forge.ErrInvalid, "a value holds a NUL byte or bytes that are not UTF-8, which this field cannot store")
	case "54000": // program_limit_exceeded: an index entry too large
		return forge.Errorf(forge.ErrInvalid, "a value is too large: %s", pe.Message)
	}
	return storeutil.DBError("postgres", err)
}

// agentChanged is the ErrConflict of a turn begun from an agent version
// that is no longer current (BeginTurn.AgentName).
type agentChanged struct{ err error }

func (e agentChanged) Error() string { return e.err.Error() }
func (e agentChanged) Unwrap() error { return e.err }

// isForgeErr reports whether err already wraps one of forge's sentinels.
func isForgeErr(err error) bool {
	return forge.ErrorCode(err) != "internal" || errors.Is(err, forge.ErrTurnEnded)
}

// uniqueErr names what a unique index refused.
func uniqueErr(pe *pgconn.PgError) error {
	switch pe.ConstraintName {
	case "turns_one_running":
		return forge.Errorf(forge.ErrTurnInProgress, "the session already has a running turn")
	case "turns_idempotency":
		return forge.Errorf(forge.ErrConflict, "the idempotency key was already used in the session")
	case "agents_live_name":
		return forge.Errorf(forge.ErrConflict, "the agent already exists")
	case "sessions_pkey":
		return forge.Errorf(forge.ErrConflict, "the session already exists")
	case "turns_pkey":
		return forge.Errorf(forge.ErrConflict, "the turn already exists")
	case "messages_pkey":
		return forge.Errorf(forge.ErrConflict, "message already exists: %s", pe.Detail)
	case "parts_pkey":
		return forge.Errorf(forge.ErrConflict, "part already exists: %s", pe.Detail)
	case "events_pkey":
		return forge.Errorf(forge.ErrConflict, "event seq already used: %s", pe.Detail)
	}
	return forge.Errorf(forge.ErrConflict, "%s", pe.Message)
}

// notFound maps a missing row to forge.ErrNotFound with a message.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return forge.Errorf(forge.ErrNotFound, format, args...)
	}
	return err
}

// pgconnTag is the command tag an Exec callback gets.
type pgconnTag = pgconn.CommandTag
