package postgres

import (
	"context"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool exposes the store's pool: tests query through the very connections
// the store uses.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// WithDial returns opts with the pool's connections made by dial.
func WithDial(opts Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) Options {
	opts.dial = dial
	return opts
}

// PoolConfig is poolConfig.
var PoolConfig = poolConfig
