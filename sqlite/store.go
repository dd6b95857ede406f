// Package sqlite is the embedded SQLite implementation of forge.Store
// (modernc.org/sqlite, pure Go).
//
// One process owns a database file at a time: an flock on the file itself,
// so that symlinks and hard links of it meet the same lock (lock_unix.go).
// All writes go through a single connection owned by one goroutine, which
// commits concurrent calls together (group commit, see writer.go), so
// writers queue in Go instead of fighting over SQLite's lock; reads use a
// separate pool and see committed data through WAL.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/eventpack"
	"github.com/forge-runtime/forge/internal/storeutil"
	"modernc.org/sqlite"
)

var _ forge.Store = (*Store)(nil)

// Store is a forge.Store on one SQLite file.
type Store struct {
	path string
	lock *ownership
	wdb  *sql.DB
	w    *writer           // owns the single write connection
	rc   *rowCache         // rows of the lookups every turn makes (cache.go)
	cp   *checkpointer     // checkpoints the WAL on its own connection
	pk   *eventpack.Packer // packs the logs of ended turns (packer.go)
	// dicts keeps the dictionaries of packed turns' rows (events.go).
	dicts *eventpack.DictCache
	// oldLog is set when the database holds events of the log before
	// packs (table events): nothing writes there any more.
	oldLog bool
	r      *pool // readers
	ids    forge.IDGen
	now    func() time.Time
	// writes times each write for ObserveWrites.
	writes storeutil.WriteTimer

	// Checkpointer settings (tests change them).
	checkpointInterval time.Duration
	restartFrames      int64
	afterCheckpoint    func() // called after each round of the checkpointer
	// writerAutocheckpoint > 0 restores, for benchmarks, the arrangement
	// this package had before the checkpointer: the writer checkpoints
	// inside the commit that takes the log past that many pages.
	writerAutocheckpoint int
	// writerQueue > 0 makes the writer's queue a buffered channel of that
	// size, so that a benchmark can see calls queued (len) and queue them
	// in a known order; callers then do not park while they wait.
	writerQueue int
	// noPacker leaves ended turns' logs unpacked until FlushEventLog
	// (tests of what the packer does).
	noPacker bool
	// packDelay is how long the packer lets ended turns gather.
	packDelay time.Duration

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the database at path, takes exclusive
// ownership of it and applies pending migrations. It fails with an error
// wrapping forge.ErrLocked when another process owns the file.
func Open(ctx context.Context, path string) (*Store, error) {
	return openStore(ctx, path, nil)
}

// openStore is Open; configure, when set, changes the Store's settings
// before it opens (tests).
func openStore(ctx context.Context, path string, configure func(*Store)) (*Store, error) {
	if path == "" || strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("sqlite: bad database path %q", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	lock, resolved, err := own(abs)
	if err != nil {
		return nil, err
	}
	s := &Store{
		path:               resolved,
		lock:               lock,
		ids:                forge.NewULIDGen(nil),
		now:                func() time.Time { return time.Now().UTC() },
		checkpointInterval: checkpointInterval,
		restartFrames:      restartFrames,
		rc:                 newRowCache(),
		packDelay:          eventpack.PackDelay,
		dicts:              eventpack.NewDictCache(dictCacheBytes),
	}
	if configure != nil {
		configure(s)
	}
	if err := s.open(ctx); err != nil {
		s.closeDBs()
		_ = lock.release()
		return nil, err
	}
	return s, nil
}

func (s *Store) open(ctx context.Context) error {
	// Pragmas are per connection. WAL lets readers run beside the writer;
	// synchronous=NORMAL in WAL survives a killed process and only risks the
	// last commits on power loss (DESIGN.md). temp_store(memory) keeps the
	// savepoint journal of a group commit (writer.go) off the disk. No
	// connection checkpoints by itself (wal_autocheckpoint=0): the
	// checkpointer does, off the writer's path (checkpoint.go).
	common := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(0)"
	writerDSN := s.path + "?" + common
	if s.writerAutocheckpoint > 0 {
		// The old arrangement, for benchmarks: the writer checkpoints in
		// its commits (a later pragma wins).
		writerDSN += fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)", s.writerAutocheckpoint)
	}
	// auto_vacuum before journal_mode: a database new to this call is
	// made one whose freed pages the retention sweeper returns to the file
	// system (ReclaimSpace); on an existing one it changes nothing.
	wdb, err := sql.Open("sqlite", writerDSN+"&_pragma=auto_vacuum(INCREMENTAL)&_pragma=journal_mode(WAL)&_pragma=cache_size(-16000)"+
		"&_pragma=temp_store(memory)"+fmt.Sprintf("&_pragma=journal_size_limit(%d)", walSizeLimit)+"&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("sqlite: open: %w", err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	s.wdb = wdb
	if err := wdb.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", s.path, err)
	}
	if err := migrateDB(ctx, wdb, s.now); err != nil {
		return err
	}
	conn, err := wdb.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", s.path, err)
	}
	cdb, err := sql.Open("sqlite", s.path+fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=synchronous(NORMAL)&_pragma=wal_autocheckpoint(0)",
		checkpointerTimeout.Milliseconds()))
	if err != nil {
		return fmt.Errorf("sqlite: open: %w", err)
	}
	cdb.SetMaxOpenConns(1)
	cdb.SetMaxIdleConns(1)
	cdb.SetConnMaxLifetime(0)
	cdb.SetConnMaxIdleTime(0)
	s.cp = newCheckpointer(cdb, s.checkpointInterval, s.restartFrames, s.afterCheckpoint)
	committed := s.cp.committed
	if s.writerAutocheckpoint > 0 {
		committed = func() {}
	}
	s.w = newWriter(conn, committed, s.writerQueue)
	// Readers open after the migrations so they never see a partial schema;
	// query_only guards against a write slipping onto the read pool.
	rdb, err := sql.Open("sqlite", s.path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		return fmt.Errorf("sqlite: open: %w", err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	rdb.SetConnMaxLifetime(0)
	rdb.SetConnMaxIdleTime(0)
	s.r = newPool(rdb)
	if err := rdb.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", s.path, err)
	}
	if err := rdb.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM events)`).Scan(&s.oldLog); err != nil {
		return fmt.Errorf("sqlite: open %s: %w", s.path, err)
	}
	s.pk = eventpack.NewPacker(packWork{s}, s.packDelay, !s.noPacker)
	return nil
}

// Ping checks that the store can serve: it is open and the file answers
// a read.
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.w.quit:
		return errClosed
	default:
	}
	if err := s.r.db.PingContext(ctx); err != nil {
		return dbErr(err)
	}
	var one int
	if err := s.r.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return dbErr(err)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database and releases ownership of the file.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closeErr = s.closeDBs()
		if err := s.lock.release(); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

func (s *Store) closeDBs() error {
	var errs []error
	if s.pk != nil {
		s.pk.Stop()
	}
	if s.cp != nil {
		errs = append(errs, s.cp.stop())
	}
	if s.w != nil {
		s.w.stop()
		errs = append(errs, s.w.close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.r != nil {
		errs = append(errs, s.r.close())
	}
	return errors.Join(errs...)
}

// pool is a *sql.DB with a cache of prepared statements: statement
// preparation costs more than most of the queries Forge runs.
type pool struct {
	db    *sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func newPool(db *sql.DB) *pool {
	return &pool{db: db, stmts: map[string]*sql.Stmt{}}
}

func (p *pool) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := p.cached(query); st != nil {
		return st, nil
	}
	st, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, storeutil.DBError("sqlite: prepare", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.stmts[query]; ok {
		_ = st.Close() // prepared concurrently
		return old, nil
	}
	if p.stmts == nil {
		_ = st.Close()
		return nil, errors.New("sqlite: store is closed")
	}
	p.stmts[query] = st
	return st, nil
}

func (p *pool) cached(query string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stmts[query]
}

// warm prepares on the pool the queries a transaction had to prepare for
// itself. It must run outside any transaction: preparing on the pool needs
// a free connection.
func (p *pool) warm(ctx context.Context, queries []string) {
	for _, q := range queries {
		_, _ = p.stmt(ctx, q)
	}
}

func (p *pool) close() error {
	p.mu.Lock()
	for _, st := range p.stmts {
		_ = st.Close()
	}
	p.stmts = nil
	p.mu.Unlock()
	return p.db.Close()
}

// tx wraps a transaction so queries use prepared statements: the
// writer's, for a write, or the read pool's.
type tx struct {
	ctx    context.Context
	w      *writer // set for a write: statements run on its connection
	p      *pool
	tx     *sql.Tx
	missed []string // queries not yet prepared on the pool
}

func (t *tx) stmt(query string) (*sql.Stmt, error) {
	if st := t.p.cached(query); st != nil {
		// Reuses the statement already prepared on the connection.
		return t.tx.StmtContext(t.ctx, st), nil
	}
	// Preparing on the pool now would wait for a connection this
	// transaction may be holding; prepare for the transaction only and
	// leave the pool's copy to warm once it ends.
	t.missed = append(t.missed, query)
	st, err := t.tx.PrepareContext(t.ctx, query)
	if err != nil {
		return nil, storeutil.DBError("sqlite: prepare", err)
	}
	return st, nil
}

// after asks, in a write, for f to run once the write has committed (and
// not at all if it does not). Cache updates go there.
func (t *tx) after(f func()) {
	if t.w == nil || t.w.cur == nil {
		panic("sqlite: tx.after outside a write")
	}
	t.w.cur.effects = append(t.w.cur.effects, f)
}

func (t *tx) exec(query string, args ...any) (sql.Result, error) {
	if t.w != nil {
		return t.w.execArgs(query, args)
	}
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(t.ctx, args...)
}

// execRows runs query with the arguments of rows one after the other (a
// multi-row INSERT).
func (t *tx) execRows(query string, rows [][]any) error {
	if t.w != nil {
		_, err := t.w.execArgs(query, rows...)
		return err
	}
	var args []any
	for _, r := range rows {
		args = append(args, r...)
	}
	_, err := t.exec(query, args...)
	return err
}

// rowIter is the rows of a query: a read's *sql.Rows, or the rows of a
// writer's statement (writerRows).
type rowIter interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// query runs a multi-row query, in a read or a write.
func (t *tx) query(query string, args ...any) (rowIter, error) {
	if t.w != nil {
		return t.w.queryRows(query, args)
	}
	st, err := t.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(t.ctx, args...)
}

func (t *tx) queryRow(query string, args ...any) row {
	if t.w != nil {
		return t.w.queryRow(query, args)
	}
	st, err := t.stmt(query)
	if err != nil {
		return row{err: err}
	}
	return row{r: st.QueryRowContext(t.ctx, args...)}
}

// row is a *sql.Row, or the rows of a writer's query, or an error.
type row struct {
	r   *sql.Row
	d   driver.Rows
	err error
}

func (r row) Scan(dest ...any) error {
	switch {
	case r.err != nil:
		return r.err
	case r.d != nil:
		return scanDriverRow(r.d, dest)
	}
	return r.r.Scan(dest...)
}

// read runs fn in a read transaction, so the queries it makes see one
// consistent snapshot.
func (s *Store) read(ctx context.Context, fn func(t *tx) error) error {
	sqlTx, err := s.r.db.BeginTx(ctx, nil)
	if err != nil {
		return storeutil.DBError("sqlite: begin", err)
	}
	t := &tx{ctx: ctx, p: s.r, tx: sqlTx}
	defer func() {
		_ = sqlTx.Rollback()
		s.r.warm(ctx, t.missed)
	}()
	return fn(t)
}

// query runs a single read-only statement on the read pool.
func (s *Store) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.r.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// queryRow runs a single-row read on the read pool. The reads it serves
// are lookups by key, over in microseconds, so it does not watch ctx once
// it has begun: watching costs database/sql and the driver a goroutine
// each, per query, more than the lookup itself.
func (s *Store) queryRow(ctx context.Context, query string, args ...any) row {
	if err := ctx.Err(); err != nil {
		return row{err: err}
	}
	ctx = context.WithoutCancel(ctx)
	st, err := s.r.stmt(ctx, query)
	if err != nil {
		return row{err: err}
	}
	return row{r: st.QueryRowContext(ctx, args...)}
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation, and
// returns SQLite's message, which names the columns of the violated index.
func isUnique(err error) (string, bool) {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case 2067, 1555: // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
			return se.Error(), true
		}
	}
	return "", false
}

// notFound maps sql.ErrNoRows to forge.ErrNotFound.
func notFound(err error, format string, args ...any) error {
	if errors.Is(err, sql.ErrNoRows) {
		return forge.Errorf(forge.ErrNotFound, format, args...)
	}
	return dbErr(err)
}

// dbErr classifies an error met on the way to the database
// (storeutil.DBError): a failure of the store wraps forge.ErrStore.
func dbErr(err error) error { return storeutil.DBError("sqlite", err) }
