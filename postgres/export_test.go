package postgres

import (
	"context"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/forge-runtime/forge/internal/migrate"
)

// Pool exposes the store's pool: tests query through the very connections
// the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// WithDial returns opts with the pool's connections made by dial.
func WithDial(opts Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) Options {
	opts.dial = dial
	return opts
}

// WithoutPacker returns opts with ended turns' logs packed only by
// FlushEventLog.
func WithoutPacker(opts Options) Options {
	opts.noPacker = true
	return opts
}

// PoolConfig is poolConfig.
var PoolConfig = poolConfig

// MigrateTo creates the roles and the schema of the database at url and
// applies the migrations up to version (a database an earlier Forge
// left).
func MigrateTo(ctx context.Context, url string, version int) error {
	r, err := newRoles("")
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := bootstrap(ctx, conn, r, true); err != nil {
		return err
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	var upTo []migrate.Migration
	for _, m := range ms {
		if m.Version <= version {
			upTo = append(upTo, m)
		}
	}
	_, err = migrate.Up(ctx, &target{conn: conn, roles: r}, upTo)
	return err
}

// PageSQL returns the query of a ListMessages page along a branch ($1
// tenant, $2 session, $3 tip turn, $4 cursor, $5 thread, $6 limit, $7
// from).
func PageSQL() string { return branchPageSQL }

// OnCheckpointGroup makes the leader of each group of checkpoints call f
// with the group's size before writing it.
func OnCheckpointGroup(s *Store, f func(n int)) {
	s.checkpoints.mu.Lock()
	defer s.checkpoints.mu.Unlock()
	s.checkpoints.onGroup = f
}

// QueuedCheckpoints is how many checkpoints wait for a group.
func QueuedCheckpoints(s *Store) int {
	s.checkpoints.mu.Lock()
	defer s.checkpoints.mu.Unlock()
	return len(s.checkpoints.queue)
}
