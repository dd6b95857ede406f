package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forge-runtime/forge/internal/migrate"
)

// Forge's roles, all NOLOGIN:
//
//   - owner owns the schema and every object in it; migrations run as it.
//   - runtime may read and write the rows of the tables, nothing more; it
//     has no BYPASSRLS, so the tenant policies bind it. Every query of the
//     store runs as it (or as a login role that is a member of it).
//   - lookup owns the SECURITY DEFINER functions that cross tenants
//     (recovery's running turns, authentication's key lookup); it can read
//     only the columns they need, and its policies admit only running turns
//     and live keys.
//
// Given a superuser (or CREATEROLE) URL, Forge creates the roles and the
// schema idempotently (concurrent replicas may start at once), migrates as
// the owner and sets every pooled connection's role to runtime. Given any
// other role, Forge uses it as is, provided it is a member of runtime, does
// not bypass row-level security and cannot become the owner; it then needs
// the schema to be migrated already.
type roles struct {
	owner, runtime, lookup string
}

var rolePrefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

func newRoles(prefix string) (roles, error) {
	if prefix == "" {
		prefix = "forge"
	}
	if !rolePrefixRE.MatchString(prefix) {
		return roles{}, fmt.Errorf("postgres: role prefix %q must be lowercase letters, digits and '_'", prefix)
	}
	return roles{owner: prefix + "_owner", runtime: prefix + "_runtime", lookup: prefix + "_lookup"}, nil
}

// expand puts the role names into a migration's text.
func (r roles) expand(sql string) string {
	return strings.NewReplacer("{{owner}}", r.owner, "{{runtime}}", r.runtime, "{{lookup}}", r.lookup).Replace(sql)
}

// migrateLock serializes the schema work of replicas starting at once on
// one database (advisory locks are per database).
const migrateLock = 0x666f7267655f6d // "forge_m"

// prepare inspects url's role on one connection and, for an administrator,
// creates the roles and the schema and migrates. It reports whether the
// role is an administrator.
func prepare(ctx context.Context, cfg *pgx.ConnConfig, r roles) (admin bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.Background())
	var super, createRole, bypass bool
	var user string
	if err := conn.QueryRow(ctx, `SELECT rolname, rolsuper, rolcreaterole, rolbypassrls FROM pg_roles
		WHERE rolname = session_user`).Scan(&user, &super, &createRole, &bypass); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	ms, err := migrations()
	if err != nil {
		return false, err
	}
	if !super && !createRole {
		return false, checkRuntimeRole(ctx, conn, r, user, bypass, ms)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	if err := bootstrap(ctx, conn, r, super); err != nil {
		return false, err
	}
	applied, err := migrate.Up(ctx, &target{conn: conn, roles: r}, ms)
	if err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	if len(applied) > 0 {
		if err := analyze(ctx, conn, r); err != nil {
			return false, err
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(migrateLock)); err != nil {
		return false, fmt.Errorf("postgres: %w", err)
	}
	return true, nil
}

// analyze gathers the statistics of every table of the schema that holds
// rows, after migrations changed it: a migration that rewrote or filled a
// table leaves it without statistics until autovacuum comes round, and
// plans made meanwhile may read a tenant's rows where an index would do.
// An empty table is left unanalyzed: statistics saying "empty" would
// mislead the planner once rows come (unanalyzed, it goes by the table's
// size on disk).
func analyze(ctx context.Context, conn *pgx.Conn, r roles) error {
	if _, err := conn.Exec(ctx, `SET ROLE `+r.owner); err != nil {
		return fmt.Errorf("postgres: analyze: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.Background(), `RESET ROLE`) }()
	if _, err := conn.Exec(ctx, `DO $$
DECLARE t text;
BEGIN
	FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = '`+schema+`' LOOP
		IF pg_relation_size(format('%I.%I', '`+schema+`', t)::regclass) > 0 THEN
			EXECUTE format('ANALYZE %I.%I', '`+schema+`', t);
		END IF;
	END LOOP;
END $$`); err != nil {
		return fmt.Errorf("postgres: analyze: %w", err)
	}
	return nil
}

// bootstrap creates the roles and the schema unless they exist. Role
// creation races replicas starting on other databases of the cluster
// (roles are cluster-wide, the advisory lock is not): a step that loses
// the race finds the role made and is retried.
func bootstrap(ctx context.Context, conn *pgx.Conn, r roles, super bool) error {
	var sql strings.Builder
	sql.WriteString("DO $$\nBEGIN\n")
	for _, role := range []string{r.owner, r.runtime, r.lookup} {
		fmt.Fprintf(&sql, `IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN
	BEGIN
		CREATE ROLE %[1]s NOLOGIN NOSUPERUSER NOBYPASSRLS;
	EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
	END;
END IF;
`, role)
	}
	grant := func(role, member string) {
		fmt.Fprintf(&sql, `IF NOT pg_has_role(%[2]s, '%[1]s', 'MEMBER') THEN
	BEGIN
		GRANT %[1]s TO %[3]s;
	EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
	END;
END IF;
`, role, member, strings.Trim(member, "'"))
	}
	// The owner hands the definer functions to lookup (ALTER ... OWNER
	// needs membership). An administrator that is not a superuser needs
	// membership to migrate as the owner and to SET ROLE to runtime.
	grant(r.lookup, "'"+r.owner+"'")
	if !super {
		grant(r.owner, "session_user")
		grant(r.runtime, "session_user")
	}
	sql.WriteString("END\n$$")
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = conn.Exec(ctx, sql.String()); err == nil || !transient(err) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("postgres: create roles: %w", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %s AUTHORIZATION %s`, schema, r.owner)); err != nil {
			return fmt.Errorf("postgres: create schema %s: %w", schema, err)
		}
	}
	return nil
}

// transient reports errors that concurrent catalog changes cause.
func transient(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "23505", "42710", "40001", "40P01":
		return true
	case "XX000":
		return strings.Contains(pe.Message, "concurrently")
	}
	return false
}

// checkRuntimeRole accepts url's own role for queries: a member of the
// runtime role that neither bypasses row-level security nor can become the
// owner (which could disable it), on a schema already migrated.
func checkRuntimeRole(ctx context.Context, conn *pgx.Conn, r roles, user string, bypass bool, ms []migrate.Migration) error {
	if bypass {
		return fmt.Errorf("postgres: role %s has BYPASSRLS: Forge refuses to query as a role that row-level security does not bind", user)
	}
	var runtimeExists, member, owner, migrated bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1),
			EXISTS (SELECT FROM pg_roles WHERE rolname = $1) AND pg_has_role(session_user, $1, 'USAGE'),
			EXISTS (SELECT FROM pg_roles WHERE rolname = $2) AND pg_has_role(session_user, $2, 'MEMBER'),
			EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = $3 AND c.relname = 'schema_migrations')`,
		r.runtime, r.owner, schema).Scan(&runtimeExists, &member, &owner, &migrated)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	switch {
	case !runtimeExists || !migrated:
		return fmt.Errorf("postgres: the database has no Forge schema yet: run `forge migrate --db <URL>` once with a superuser's URL (or a role with CREATEROLE)")
	case owner:
		return fmt.Errorf("postgres: role %s can act as %s, which can disable row-level security: give Forge a role that is only a member of %s", user, r.owner, r.runtime)
	case !member:
		return fmt.Errorf("postgres: role %s is not a member of %s (GRANT %s TO %s)", user, r.runtime, r.runtime, user)
	}
	pending, err := migrate.Pending(ctx, &target{conn: conn, roles: r, readOnly: true}, ms)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if len(pending) > 0 {
		return fmt.Errorf("postgres: the database schema lacks migration %s: run `forge migrate --db <URL>` with a superuser's URL (or a role with CREATEROLE)", pending[0].Name)
	}
	return nil
}
