package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/storeutil"
)

// An agent is a row in agents (identity, current version, deletion) plus
// one immutable row per version in agent_versions (the definition as JSON).
// Agent.UpdatedAt is the creation time of the version read.

// CreateAgent inserts version 1 of a new agent.
func (s *Store) CreateAgent(ctx context.Context, a *forge.Agent) error {
	now := s.now()
	c, err := storeutil.NewAgent(a, s.ids, now)
	if err != nil {
		return err
	}
	body, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("postgres: encode agent: %w", err)
	}
	b := batch(c.Tenant)
	b.Queue(`INSERT INTO agents (tenant, id, name, version, created_at, session_ttl) VALUES ($1, $2, $3, 1, $4, $5)`,
		c.Tenant, c.ID, c.Name, now, storeutil.SessionTTL(&c))
	b.Queue(`INSERT INTO agent_versions (tenant, agent_id, version, body, created_at) VALUES ($1, $2, 1, $3, $4)`,
		c.Tenant, c.ID, string(body), now)
	if err := s.write(ctx, b); err != nil {
		if errors.Is(err, forge.ErrConflict) {
			return forge.Errorf(forge.ErrConflict, "agent %q already exists", c.Name)
		}
		return err
	}
	a.ID, a.Version, a.CreatedAt, a.UpdatedAt = c.ID, c.Version, c.CreatedAt, c.UpdatedAt
	s.cache.dropAgent(c.Tenant, c.Name) // a deleted agent's name, reused
	return nil
}

// UpdateAgent stores a new version of the live agent named a.Name. One
// statement bumps the version (the row lock orders concurrent updates) and
// inserts the new version's row.
func (s *Store) UpdateAgent(ctx context.Context, a *forge.Agent) error {
	if err := storeutil.CheckAgent(a); err != nil {
		return err
	}
	now := s.now()
	c := *a
	// The stored body's identity fields are not read back (the columns
	// are), so it is encoded before they are known.
	body, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("postgres: encode agent: %w", err)
	}
	var created time.Time
	b := batch(c.Tenant)
	b.Queue(`WITH a AS (
			UPDATE agents SET version = version + 1, session_ttl = $5
			WHERE tenant = $1 AND name = $2 AND deleted_at IS NULL
			RETURNING id, version, created_at
		), v AS (
			INSERT INTO agent_versions (tenant, agent_id, version, body, created_at)
			SELECT $1, a.id, a.version, $3, $4 FROM a
		)
		SELECT id, version, created_at FROM a`, c.Tenant, c.Name, string(body), now, storeutil.SessionTTL(&c)).
		QueryRow(func(r pgx.Row) error {
			return notFound(r.Scan(&c.ID, &c.Version, &created), "agent %q not found", c.Name)
		})
	err = s.write(ctx, b)
	s.cache.dropAgent(c.Tenant, c.Name)
	if err != nil {
		return err
	}
	a.ID, a.Version, a.CreatedAt, a.UpdatedAt = c.ID, c.Version, utc(created), now
	return nil
}

const agentCols = `a.id, a.name, v.version, a.created_at, v.created_at, v.body`

func scanAgent(sc pgx.Row, tenant string) (*forge.Agent, error) {
	var (
		id, name, body   string
		version          int
		created, updated time.Time
	)
	if err := sc.Scan(&id, &name, &version, &created, &updated, &body); err != nil {
		return nil, err
	}
	a, err := storeutil.Agent([]byte(body), id, tenant, name, version, utc(created), utc(updated))
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return a, nil
}

// getAgent runs a one-agent query for tenant.
func (s *Store) getAgent(ctx context.Context, tenant, query string, args []any, format string, fargs ...any) (*forge.Agent, error) {
	var a *forge.Agent
	b := batch(tenant)
	b.Queue(query, args...).QueryRow(func(r pgx.Row) error {
		var err error
		a, err = scanAgent(r, tenant)
		return notFound(err, format, fargs...)
	})
	if err := s.read(ctx, b); err != nil {
		return nil, err
	}
	return a, nil
}

// GetAgent returns the current version of a live agent.
func (s *Store) GetAgent(ctx context.Context, tenant, name string) (*forge.Agent, error) {
	return s.getAgent(ctx, tenant, `SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id AND v.version = a.version
		WHERE a.tenant = $1 AND a.name = $2 AND a.deleted_at IS NULL`, []any{tenant, name}, "agent %q not found", name)
}

// GetAgentVersion returns one version of an agent, deleted or not.
func (s *Store) GetAgentVersion(ctx context.Context, tenant, id string, version int) (*forge.Agent, error) {
	return s.getAgent(ctx, tenant, `SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id
		WHERE a.tenant = $1 AND a.id = $2 AND v.version = $3`, []any{tenant, id, version},
		"agent %s version %d not found", id, version)
}

// ListAgents lists live agents by name. The cursor is the last name seen.
func (s *Store) ListAgents(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Agent, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	var out []*forge.Agent
	b := batch(tenant)
	b.Queue(`SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id AND v.version = a.version
		WHERE a.tenant = $1 AND a.deleted_at IS NULL AND a.name > $2
		ORDER BY a.name LIMIT $3`, tenant, opts.Cursor, limit+1).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			a, err := scanAgent(rows, tenant)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return rows.Err()
	})
	if err := s.read(ctx, b); err != nil {
		return nil, "", err
	}
	out, next := storeutil.Page(out, limit, func(a *forge.Agent) string { return a.Name })
	return out, next, nil
}

// DeleteAgent hides the live agent named name; its versions stay readable.
func (s *Store) DeleteAgent(ctx context.Context, tenant, name string) error {
	b := batch(tenant)
	b.Queue(`UPDATE agents SET deleted_at = $3 WHERE tenant = $1 AND name = $2 AND deleted_at IS NULL`,
		tenant, name, s.now()).Exec(func(ct pgconnTag) error {
		if ct.RowsAffected() == 0 {
			return forge.Errorf(forge.ErrNotFound, "agent %q not found", name)
		}
		return nil
	})
	err := s.write(ctx, b)
	s.cache.dropAgent(tenant, name)
	return err
}
