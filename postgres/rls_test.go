package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
)

var ctx = context.Background()

// tenantTables are every table that carries a tenant.
var tenantTables = []string{"agents", "agent_versions", "sessions", "turns", "messages", "parts", "events",
	"event_log", "snapshots", "idempotency", "api_keys", "turn_leases", "participants",
	"files", "file_blobs", "file_chunks", "schedules", "schedule_runs", "webhooks", "webhook_deliveries"}

// seed writes rows of every kind for tenant through the store and returns
// the session; its turn stays running when running is true.
func seed(t *testing.T, s *postgres.Store, tenant string, running bool) *forge.Session {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateAgent(ctx, &forge.Agent{Tenant: tenant, Name: "support", Model: "openai/gpt-4.1-mini"}))
	ids := forge.NewULIDGen(nil)
	ses := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Agent: "support", Title: tenant + " secret",
		MainThreadID: ids.New(forge.PrefixThread)}
	must(s.CreateSession(ctx, ses))
	must(s.CreateWebhook(ctx, &forge.Webhook{Tenant: tenant, URL: "https://hooks.example.com/" + tenant,
		Events: []string{forge.EventActionRequired}}))
	turnID := ids.New(forge.PrefixTurn)
	msg := &forge.Message{ID: ids.New(forge.PrefixMessage), ThreadID: ses.MainThreadID, Role: forge.RoleUser,
		Parts: []*forge.Part{{ID: ids.New(forge.PrefixPart), Type: forge.PartText, Text: tenant + " question"}}}
	must(s.BeginTurn(ctx, &forge.BeginTurn{
		Turn:     &forge.Turn{ID: turnID, Tenant: tenant, SessionID: ses.ID, AgentID: "ag_1", AgentVersion: 1},
		Messages: []*forge.Message{msg},
		Events:   []forge.Event{{Seq: 1, ID: turnID, Type: forge.EventTurnCreated, SessionID: ses.ID, Data: []byte(`{}`)}},
		Lease:    &forge.Lease{Owner: "replica-" + tenant, TTL: time.Hour},
	}))
	// action.required queues a delivery to the webhook.
	end := &forge.Batch{Tenant: tenant, SessionID: ses.ID, TurnID: turnID, Snapshot: &forge.Snapshot{},
		Events: []forge.Event{{Seq: 2, ID: turnID, Type: forge.EventActionRequired, SessionID: ses.ID, TurnID: &turnID, Data: []byte(`{}`)}}}
	if !running {
		end.Turn = &forge.Turn{Status: forge.TurnDone}
	}
	must(s.Commit(ctx, end))
	// A row of the log of schema version 4 and earlier (nothing writes
	// there any more).
	tx, err := s.Pool().Begin(ctx)
	must(err)
	_, err = tx.Exec(ctx, `SELECT set_config('forge.tenant', $1, true)`, tenant)
	must(err)
	_, err = tx.Exec(ctx, `INSERT INTO events (tenant, session_id, seq, id, type, created_at) VALUES ($1, $2, 0, $3, 'turn.created', now())`,
		tenant, ses.ID, turnID)
	must(err)
	must(tx.Commit(ctx))
	_, err = s.PutIdempotency(ctx, tenant, &forge.IdempotencyRecord{Key: "k", Scope: "s", Status: 200})
	must(err)
	_, _, err = s.CreateKey(ctx, tenant, "ci")
	must(err)
	data := []byte(tenant + " secret file")
	sum := sha256.Sum256(data)
	must(s.CreateFile(ctx, &forge.File{Tenant: tenant, Filename: "secret.txt", MimeType: "text/plain",
		Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, bytes.NewReader(data)))
	now := time.Now().UTC().Truncate(time.Millisecond)
	sch := &forge.Schedule{ID: ids.New(forge.PrefixSchedule), Tenant: tenant, Agent: "support", Every: "1m", Timezone: "UTC",
		Input: []forge.Input{{Type: forge.InputMessage, Text: tenant + " secret digest"}}, CatchUp: forge.CatchUpOnce,
		NextRunAt: now, CreatedAt: now, UpdatedAt: now}
	must(s.CreateSchedule(ctx, sch))
	claimed, err := s.ClaimScheduleSlot(ctx, &forge.ScheduleClaim{Tenant: tenant, ScheduleID: sch.ID, Slot: now, Next: now.Add(time.Hour),
		Run: &forge.ScheduleRun{ID: ids.New(forge.PrefixScheduleRun), Tenant: tenant, ScheduleID: sch.ID, Slot: now, FiredAt: now, Status: forge.RunPending}})
	must(err)
	if !claimed {
		t.Fatal("the seed schedule's slot was not claimed")
	}
	forum := &forge.Session{ID: ids.New(forge.PrefixSession), Tenant: tenant, Kind: forge.KindForum,
		MainThreadID: ids.New(forge.PrefixThread)}
	must(s.CreateSession(ctx, forum))
	must(s.AddParticipant(ctx, &forge.Participant{ID: ids.New(forge.PrefixParticipant), Tenant: tenant, ForumID: forum.ID,
		Actor: forge.Actor{Type: forge.ActorHuman, ID: tenant + "-alice"}, ActorID: "human:" + tenant + "-alice"}, nil, nil))
	return ses
}

// loginRole creates a login role (cluster-wide) with the given options,
// dropped when t ends, and returns its name.
func loginRole(t *testing.T, admin, options string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "forge_probe_" + hex.EncodeToString(b)
	pgtest.Exec(t, admin, "CREATE ROLE "+name+" LOGIN "+options)
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop role %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		// Its sessions (a pool being closed) may linger an instant.
		_, _ = c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name)
		if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+name); err != nil {
			t.Errorf("drop role %s: %v", name, err)
		}
	})
	return name
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// inTx runs fn in a transaction of c that is always rolled back.
func inTx(t *testing.T, c *pgx.Conn, tenant string, fn func(tx pgx.Tx)) {
	t.Helper()
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if tenant != "" {
		if _, err := tx.Exec(ctx, `SELECT set_config('forge.tenant', $1, true)`, tenant); err != nil {
			t.Fatal(err)
		}
	}
	fn(tx)
}

func count(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestForgottenTenantFilterSeesNothingElse: a raw query without any tenant
// filter, run as the role the store queries as, sees only the rows of the
// tenant its transaction set, and nothing at all with no tenant set; it
// cannot write another tenant's rows; and the role can neither switch row
// security off nor become a role that could.
func TestForgottenTenantFilterSeesNothingElse(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewDatabase(t)
	s := open(t, admin, testOpts)
	a := seed(t, s, "acme", true)
	b := seed(t, s, "globex", true)

	// The role a member of the runtime role logs in as, as an operator who
	// does not give Forge a superuser would.
	probe := loginRole(t, admin, "IN ROLE forge_runtime")
	c, err := pgx.Connect(ctx, pgtest.WithParam(t, pgtest.WithUser(t, admin, probe), "search_path", "forge"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)

	// The store's own connections query as the runtime role.
	var user string
	if err := s.Pool().QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != "forge_runtime" {
		t.Fatalf("the store queries as %q (%v), want forge_runtime", user, err)
	}

	for _, q := range []interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}{s.Pool(), c} {
		// No tenant set: nothing, in every tenant table.
		for _, table := range tenantTables {
			if n := count(t, q, `SELECT count(*) FROM forge.`+table); n != 0 {
				t.Errorf("%s: %d rows visible with no tenant set", table, n)
			}
		}
	}

	inTx(t, c, "acme", func(tx pgx.Tx) {
		rows, err := tx.Query(ctx, `SELECT * FROM sessions WHERE kind = 'direct'`) // no tenant filter
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowToMap)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0]["id"] != a.ID || got[0]["tenant"] != "acme" {
			t.Fatalf("SELECT * FROM sessions as acme: %v, want only %s", got, a.ID)
		}
		for _, table := range tenantTables {
			if n := count(t, tx, `SELECT count(*) FROM `+table+` WHERE tenant <> 'acme'`); n != 0 {
				t.Errorf("%s: acme sees %d rows of another tenant", table, n)
			}
			if n := count(t, tx, `SELECT count(*) FROM `+table); n == 0 {
				t.Errorf("%s: acme sees none of its own rows", table)
			}
		}
		// An unfiltered UPDATE touches acme's rows only.
		tag, err := tx.Exec(ctx, `UPDATE sessions SET title = 'overwritten'::bytea WHERE kind = 'direct'`)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("unfiltered UPDATE as acme: %v rows, %v", tag.RowsAffected(), err)
		}
	})
	inTx(t, c, "acme", func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `INSERT INTO sessions (tenant, id, kind, agent, title, main_thread_id, created_at, updated_at)
			VALUES ('globex', 'ses_forged', 'direct', 'a', ''::bytea, 'thr', now(), now())`)
		if sqlState(err) != "42501" {
			t.Fatalf("acme writing a globex row: %v, want a row-level security violation", err)
		}
	})
	inTx(t, c, "acme", func(tx pgx.Tx) {
		_, err := tx.Exec(ctx, `UPDATE sessions SET tenant = 'globex'`)
		if sqlState(err) != "42501" {
			t.Fatalf("acme moving its row to globex: %v, want a row-level security violation", err)
		}
	})
	if got, err := s.GetSession(ctx, "globex", b.ID); err != nil || got.Title != "globex secret" {
		t.Fatalf("globex's session after acme's attempts: %v, %v", got, err)
	}

	for _, stmt := range []string{
		`ALTER TABLE sessions DISABLE ROW LEVEL SECURITY`,
		`ALTER TABLE sessions NO FORCE ROW LEVEL SECURITY`,
		`DROP POLICY tenant_isolation ON sessions`,
		`CREATE POLICY open ON sessions USING (true)`,
		`SET ROLE forge_owner`,
		`SET ROLE forge_lookup`,
		`SET SESSION AUTHORIZATION postgres`,
		`CREATE TABLE forge.shadow (id text)`,
		`CREATE FUNCTION forge.running_turns() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		`ALTER ROLE ` + probe + ` BYPASSRLS`,
		`GRANT forge_owner TO ` + probe,
	} {
		if _, err := c.Exec(ctx, stmt); err == nil {
			t.Errorf("the runtime role could run %q", stmt)
		} else if st := sqlState(err); st != "42501" && st != "42723" {
			t.Errorf("%q: %v, want a permission error", stmt, err)
		}
	}
	var current string
	if err := c.QueryRow(ctx, `SELECT current_user`).Scan(&current); err != nil || current != probe {
		t.Fatalf("current_user = %q, %v", current, err)
	}

	// The deliberate cross-tenant path returns ids of running turns, and
	// the key lookup needs the key's hash.
	ids := count(t, c, `SELECT count(*) FROM running_turns()`)
	if ids != 2 {
		t.Fatalf("running_turns() as the runtime role: %d rows, want 2", ids)
	}
	if n := count(t, c, `SELECT count(*) FROM api_key_by_hash('\x00'::bytea)`); n != 0 {
		t.Fatalf("api_key_by_hash of a made-up hash: %d rows", n)
	}
}

// TestOpenRefusesRolesThatBypassRowSecurity: Forge will not query as a
// role that row-level security does not bind, or that could switch it off.
func TestOpenRefusesRolesThatBypassRowSecurity(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewDatabase(t)
	open(t, admin, testOpts).Close(ctx) // migrated, roles made

	for _, c := range []struct {
		name, options, want string
	}{
		{"bypassrls", "BYPASSRLS IN ROLE forge_runtime", "BYPASSRLS"},
		{"member of the owner", "IN ROLE forge_runtime, forge_owner", "forge_owner"},
		{"not a member of runtime", "", "not a member of forge_runtime"},
	} {
		role := loginRole(t, admin, c.options)
		_, err := postgres.Open(ctx, pgtest.WithUser(t, admin, role), testOpts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Open = %v, want an error naming %s", c.name, err, c.want)
		}
	}
}

// TestOpenAsRuntimeLoginRole: given an unprivileged role that is a member
// of the runtime role, Forge uses it as is, on a migrated database.
func TestOpenAsRuntimeLoginRole(t *testing.T) {
	t.Parallel()
	// Roles are the cluster's: another database makes them (the test may
	// run first), so that this one is not migrated yet.
	open(t, pgtest.NewDatabase(t), testOpts).Close(ctx)
	admin := pgtest.NewDatabase(t)
	role := loginRole(t, admin, "IN ROLE forge_runtime")
	url := pgtest.WithUser(t, admin, role)

	// Before anything is migrated, it cannot start and says what to do.
	if _, err := postgres.Open(ctx, url, testOpts); err == nil || !strings.Contains(err.Error(), "forge migrate") {
		t.Fatalf("Open on an empty database: %v, want advice to migrate", err)
	}
	adminStore := open(t, admin, testOpts)
	ses := seed(t, adminStore, "acme", true)
	_, secret, err := adminStore.CreateKey(ctx, "acme", "ops")
	if err != nil {
		t.Fatal(err)
	}

	s := open(t, url, testOpts)
	var user string
	if err := s.Pool().QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != role {
		t.Fatalf("queries run as %q (%v), want %s", user, err, role)
	}
	if got, err := s.GetSession(ctx, "acme", ses.ID); err != nil || got.Title != "acme secret" {
		t.Fatalf("GetSession: %v, %v", got, err)
	}
	running, err := s.RunningTurns(ctx)
	if err != nil || len(running) != 1 || running[0].Tenant != "acme" {
		t.Fatalf("RunningTurns: %v, %v", running, err)
	}
	if k, err := s.KeyByHash(ctx, forge.HashAPIKey(secret)); err != nil || k.Tenant != "acme" {
		t.Fatalf("KeyByHash: %v, %v", k, err)
	}
	// Operator calls across tenants need the owner, which this role is not.
	if _, _, err := s.ListKeys(ctx, forge.AllTenants, forge.ListOptions{}); !errors.Is(err, forge.ErrUnauthorized) {
		t.Fatalf("ListKeys(AllTenants) as the runtime role: %v", err)
	}
	if keys, _, err := s.ListKeys(ctx, "acme", forge.ListOptions{}); err != nil || len(keys) != 2 {
		t.Fatalf("ListKeys(acme): %v, %v", keys, err)
	}
}

// TestConcurrentStartsBootstrapOnce: replicas starting at once, on one
// database and on several, with roles that do not exist yet, all succeed;
// each migration is applied once.
func TestConcurrentStartsBootstrapOnce(t *testing.T) {
	t.Parallel()
	admin := pgtest.URL(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "forge_t" + hex.EncodeToString(b)
	t.Cleanup(func() { // runs after the databases are dropped
		for _, r := range []string{"_runtime", "_lookup", "_owner"} {
			pgtest.Exec(t, admin, "DROP ROLE IF EXISTS "+prefix+r)
		}
	})
	shared := pgtest.NewDatabase(t)
	urls := []string{shared, shared, shared, shared, pgtest.NewDatabase(t), pgtest.NewDatabase(t)}
	opts := testOpts
	opts.RolePrefix = prefix
	errs := make(chan error, len(urls))
	start := make(chan struct{})
	for _, u := range urls {
		go func() {
			<-start
			s, err := postgres.Open(ctx, u, opts)
			if err == nil {
				t.Cleanup(func() { _ = s.Close(ctx) })
				_, err = s.ReserveSeqs(ctx, "acme", "ses_none", 1)
				if errors.Is(err, forge.ErrNotFound) {
					err = nil
				}
			}
			errs <- err
		}()
	}
	close(start)
	for range urls {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Open: %v", err)
		}
	}
	c, err := pgx.Connect(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n, distinct int
	if err := c.QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM forge.schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != distinct || n == 0 {
		t.Fatalf("schema_migrations has %d rows for %d versions", n, distinct)
	}
	var owner string
	if err := c.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE schemaname = 'forge' AND tablename = 'turns'`).Scan(&owner); err != nil || owner != prefix+"_owner" {
		t.Fatalf("turns is owned by %q (%v)", owner, err)
	}
}

// TestEveryTableHasForcedRowSecurity guards future migrations: every table
// of the schema but the migrations' own has row-level security, forced,
// with the tenant policy, and a tenant column that cannot be empty.
func TestEveryTableHasForcedRowSecurity(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	open(t, url, testOpts)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
			EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'tenant_isolation'
				AND p.polroles = '{0}' AND pg_get_expr(p.polqual, p.polrelid) LIKE '%current_setting(''forge.tenant''::text, true)%'),
			EXISTS (SELECT FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'c'
				AND pg_get_constraintdef(k.oid) LIKE '%tenant <> ''''::text%')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'forge' AND c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations'
		ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for rows.Next() {
		var (
			name                         string
			rls, force, policy, nonEmpty bool
		)
		if err := rows.Scan(&name, &rls, &force, &policy, &nonEmpty); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, name)
		if !rls || !force || !policy || !nonEmpty {
			t.Errorf("table %s: row security %v, forced %v, tenant policy %v, tenant <> '' %v", name, rls, force, policy, nonEmpty)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(tenantTables) {
		t.Errorf("tables %v; the RLS test covers %v", seen, tenantTables)
	}
}

// TestOpenAsCreateRoleAdministrator: a role that is no superuser but may
// create roles (a managed PostgreSQL's administrator) bootstraps Forge
// like a superuser: it creates the roles, grants itself what it needs,
// migrates as the owner, and queries as the runtime role.
func TestOpenAsCreateRoleAdministrator(t *testing.T) {
	t.Parallel()
	admin := pgtest.URL(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	prefix := "forge_c" + hex.EncodeToString(b)
	t.Cleanup(func() {
		for _, r := range []string{"_runtime", "_lookup", "_owner"} {
			pgtest.Exec(t, admin, "DROP ROLE IF EXISTS "+prefix+r)
		}
	})
	role := loginRole(t, admin, "CREATEROLE")
	db := pgtest.NewDatabase(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, db, "GRANT CREATE ON DATABASE "+strings.TrimPrefix(u.Path, "/")+" TO "+role)

	opts := testOpts
	opts.RolePrefix = prefix
	s := open(t, pgtest.WithUser(t, db, role), opts)
	var user string
	if err := s.Pool().QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != prefix+"_runtime" {
		t.Fatalf("queries run as %q (%v)", user, err)
	}
	seed(t, s, "acme", true)
	if keys, _, err := s.ListKeys(ctx, forge.AllTenants, forge.ListOptions{}); err != nil || len(keys) != 1 {
		t.Fatalf("ListKeys(AllTenants) as an administrator: %v, %v", keys, err)
	}
}
