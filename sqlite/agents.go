package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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
		return fmt.Errorf("sqlite: encode agent: %w", err)
	}
	err = s.write(ctx, func(t *tx) error {
		if _, err := t.exec(`INSERT INTO agents (tenant, id, name, version, created_at, session_ttl) VALUES (?, ?, ?, 1, ?, ?)`,
			c.Tenant, c.ID, c.Name, unixNano(now), storeutil.SessionTTL(&c)); err != nil {
			if _, ok := isUnique(err); ok {
				return forge.Errorf(forge.ErrConflict, "agent %q already exists", c.Name)
			}
			return dbErr(err)
		}
		_, err := t.exec(`INSERT INTO agent_versions (tenant, agent_id, version, body, created_at) VALUES (?, ?, 1, ?, ?)`,
			c.Tenant, c.ID, string(body), unixNano(now))
		t.after(func() { s.rc.dropAgent(c.Tenant, c.Name) })
		return dbErr(err)
	})
	if err != nil {
		return err
	}
	a.ID, a.Version, a.CreatedAt, a.UpdatedAt = c.ID, c.Version, c.CreatedAt, c.UpdatedAt
	return nil
}

// UpdateAgent stores a new version of the live agent named a.Name.
func (s *Store) UpdateAgent(ctx context.Context, a *forge.Agent) error {
	if err := storeutil.CheckAgent(a); err != nil {
		return err
	}
	now := s.now()
	c := *a
	err := s.write(ctx, func(t *tx) error {
		var created int64
		err := t.queryRow(`SELECT id, version, created_at FROM agents WHERE tenant = ? AND name = ? AND deleted_at IS NULL`,
			c.Tenant, c.Name).Scan(&c.ID, &c.Version, &created)
		if err != nil {
			return notFound(err, "agent %q not found", c.Name)
		}
		c.Version++
		c.CreatedAt, c.UpdatedAt = fromNano(created), now
		body, err := json.Marshal(&c)
		if err != nil {
			return fmt.Errorf("sqlite: encode agent: %w", err)
		}
		if _, err := t.exec(`INSERT INTO agent_versions (tenant, agent_id, version, body, created_at) VALUES (?, ?, ?, ?, ?)`,
			c.Tenant, c.ID, c.Version, string(body), unixNano(now)); err != nil {
			return dbErr(err)
		}
		_, err = t.exec(`UPDATE agents SET version = ?, session_ttl = ? WHERE tenant = ? AND id = ?`,
			c.Version, storeutil.SessionTTL(&c), c.Tenant, c.ID)
		t.after(func() { s.rc.dropAgent(c.Tenant, c.Name) })
		return dbErr(err)
	})
	if err != nil {
		return err
	}
	a.ID, a.Version, a.CreatedAt, a.UpdatedAt = c.ID, c.Version, c.CreatedAt, c.UpdatedAt
	return nil
}

const agentCols = `a.id, a.name, v.version, a.created_at, v.created_at, v.body`

func scanAgent(sc interface{ Scan(...any) error }, tenant string) (*forge.Agent, error) {
	var (
		id, name, body   string
		version          int
		created, updated int64
	)
	if err := sc.Scan(&id, &name, &version, &created, &updated, &body); err != nil {
		return nil, err
	}
	a, err := storeutil.Agent([]byte(body), id, tenant, name, version, fromNano(created), fromNano(updated))
	if err != nil {
		return nil, dbErr(err)
	}
	return a, nil
}

// GetAgent returns the current version of a live agent (from the row
// cache when it holds it).
func (s *Store) GetAgent(ctx context.Context, tenant, name string) (*forge.Agent, error) {
	if a, ok := s.rc.agent(tenant, name); ok {
		return a, nil
	}
	epoch := s.rc.begin()
	vals, err := s.queryValues(ctx, colCount(agentCols), `SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id AND v.version = a.version
		WHERE a.tenant = ? AND a.name = ? AND a.deleted_at IS NULL`, tenant, name)
	if err != nil {
		return nil, notFound(err, "agent %q not found", name)
	}
	a, err := scanAgent(valuesRow(vals), tenant)
	if err != nil {
		return nil, err
	}
	s.rc.fillAgent(epoch, tenant, name, a)
	return a, nil
}

// GetAgentVersion returns one version of an agent, deleted or not.
// AgentForTurn is GetAgent: this Store owns its file and its row cache is
// written through, so what it returns is never stale.
func (s *Store) AgentForTurn(ctx context.Context, tenant, name string) (*forge.Agent, error) {
	return s.GetAgent(ctx, tenant, name)
}

// agentIsCurrent refuses a turn prepared from an agent version that is no
// longer the live agent's current one (BeginTurn.AgentName).
func agentIsCurrent(t *tx, tenant, name, id string, version int) error {
	var curID string
	var cur int
	err := t.queryRow(`SELECT id, version FROM agents WHERE tenant = ? AND name = ? AND deleted_at IS NULL`, tenant, name).
		Scan(&curID, &cur)
	if errors.Is(err, sql.ErrNoRows) || err == nil && (curID != id || cur != version) {
		return forge.Errorf(forge.ErrConflict, "agent %q changed since the turn was prepared", name)
	}
	return err
}

func (s *Store) GetAgentVersion(ctx context.Context, tenant, id string, version int) (*forge.Agent, error) {
	a, err := scanAgent(s.queryRow(ctx, `SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id
		WHERE a.tenant = ? AND a.id = ? AND v.version = ?`, tenant, id, version), tenant)
	if err != nil {
		return nil, notFound(err, "agent %s version %d not found", id, version)
	}
	return a, nil
}

// ListAgents lists live agents by name. The cursor is the last name seen.
func (s *Store) ListAgents(ctx context.Context, tenant string, opts forge.ListOptions) ([]*forge.Agent, string, error) {
	limit := storeutil.Limit(opts.Limit, storeutil.DefaultLimit)
	rows, err := s.query(ctx, `SELECT `+agentCols+` FROM agents a
		JOIN agent_versions v ON v.tenant = a.tenant AND v.agent_id = a.id AND v.version = a.version
		WHERE a.tenant = ? AND a.deleted_at IS NULL AND a.name > ?
		ORDER BY a.name LIMIT ?`, tenant, opts.Cursor, limit+1)
	if err != nil {
		return nil, "", dbErr(err)
	}
	defer rows.Close()
	var out []*forge.Agent
	for rows.Next() {
		a, err := scanAgent(rows, tenant)
		if err != nil {
			return nil, "", dbErr(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr(err)
	}
	out, next := storeutil.Page(out, limit, func(a *forge.Agent) string { return a.Name })
	return out, next, nil
}

// DeleteAgent hides the live agent named name; its versions stay readable.
func (s *Store) DeleteAgent(ctx context.Context, tenant, name string) error {
	return s.write(ctx, func(t *tx) error {
		res, err := t.exec(`UPDATE agents SET deleted_at = ? WHERE tenant = ? AND name = ? AND deleted_at IS NULL`,
			unixNano(s.now()), tenant, name)
		if err != nil {
			return dbErr(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return forge.Errorf(forge.ErrNotFound, "agent %q not found", name)
		}
		t.after(func() { s.rc.dropAgent(tenant, name) })
		return nil
	})
}
