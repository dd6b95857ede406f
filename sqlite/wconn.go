package sqlite

import (
	"bytes"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/forge-runtime/forge/internal/storeutil"
)

// The writer's statements, run on the driver connection: no connection
// pool to go through, no per-call argument slices, no context watchers.

// wstmt is a prepared statement of the driver.
type wstmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// stmt returns query prepared on the write connection. Only the writer
// goroutine uses the cache.
func (w *writer) stmt(query string) (wstmt, error) {
	if st := w.stmts[query]; st != nil {
		return st, nil
	}
	ds, err := w.dc.PrepareContext(w.ctx, query)
	if err != nil {
		return nil, storeutil.DBError("sqlite: prepare", err)
	}
	st, ok := ds.(wstmt)
	if !ok {
		_ = ds.Close()
		return nil, fmt.Errorf("sqlite: driver statement %T cannot run with a context", ds)
	}
	w.stmts[query] = st
	return st, nil
}

// exec runs a statement without arguments (transaction control).
func (w *writer) exec(query string) error {
	_, err := w.execArgs(query)
	return err
}

// execArgs runs query with the arguments of each of its rows in turn (the
// rows of a multi-row INSERT, or a single list).
func (w *writer) execArgs(query string, rows ...[]any) (sql.Result, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	nv, err := w.named(rows...)
	if err != nil {
		return nil, err
	}
	defer clear(nv) // keep no row alive in the buffer
	return st.ExecContext(w.ctx, nv)
}

// queryRow runs a query whose first row the returned row scans.
func (w *writer) queryRow(query string, args []any) row {
	st, err := w.stmt(query)
	if err != nil {
		return row{err: err}
	}
	nv, err := w.named(args)
	if err != nil {
		return row{err: err}
	}
	defer clear(nv)
	rows, err := st.QueryContext(w.ctx, nv)
	if err != nil {
		return row{err: err}
	}
	return row{d: rows}
}

// queryRows runs a query whose rows the returned iterator reads. The rows
// must be read to the end or closed before the next statement.
func (w *writer) queryRows(query string, args []any) (rowIter, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	nv, err := w.named(args)
	if err != nil {
		return nil, err
	}
	defer clear(nv)
	rows, err := st.QueryContext(w.ctx, nv)
	if err != nil {
		return nil, err
	}
	return &writerRows{d: rows, vals: make([]driver.Value, len(rows.Columns()))}, nil
}

// writerRows iterates over the rows of a writer's statement as *sql.Rows
// would.
type writerRows struct {
	d    driver.Rows
	vals []driver.Value
	err  error
	done bool
}

func (r *writerRows) Next() bool {
	if r.done {
		return false
	}
	if err := r.d.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		r.done = true
		_ = r.d.Close()
		return false
	}
	return true
}

func (r *writerRows) Scan(dest ...any) error {
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite: scan: %d columns into %d destinations", len(r.vals), len(dest))
	}
	for i, v := range r.vals {
		if b, ok := v.([]byte); ok {
			v = bytes.Clone(b) // the driver reuses it
		}
		if err := assign(dest[i], v); err != nil {
			return fmt.Errorf("sqlite: scan column %d: %w", i, err)
		}
	}
	return nil
}

func (r *writerRows) Err() error { return r.err }

func (r *writerRows) Close() error {
	if r.done {
		return nil
	}
	r.done = true
	return r.d.Close()
}

// named converts arguments as database/sql would, into a buffer reused
// from one statement to the next (the driver copies what it binds).
func (w *writer) named(rows ...[]any) ([]driver.NamedValue, error) {
	nv := w.nv[:0]
	for _, args := range rows {
		for _, a := range args {
			switch v := a.(type) {
			case nil, int64, float64, bool, []byte, string, time.Time:
			case int:
				a = int64(v)
			default:
				c, err := driver.DefaultParameterConverter.ConvertValue(a)
				if err != nil {
					return nil, fmt.Errorf("sqlite: argument %d: %w", len(nv)+1, err)
				}
				a = c
			}
			nv = append(nv, driver.NamedValue{Ordinal: len(nv) + 1, Value: a})
		}
	}
	w.nv = nv
	return nv, nil
}

// scanDriverRow scans the first row of rows into dest, like sql.Row.Scan,
// and closes rows.
func scanDriverRow(rows driver.Rows, dest []any) (err error) {
	defer func() {
		if cerr := rows.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	vals := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(vals); err != nil {
		if errors.Is(err, io.EOF) {
			return sql.ErrNoRows
		}
		return err
	}
	if len(dest) != len(vals) {
		return fmt.Errorf("sqlite: scan: %d columns into %d destinations", len(vals), len(dest))
	}
	for i, v := range vals {
		if err := assign(dest[i], v); err != nil {
			return fmt.Errorf("sqlite: scan column %d: %w", i, err)
		}
	}
	return nil
}

// assign stores a driver value into a destination of the kinds the
// writes and the row cache scan, as database/sql's Scan would.
func assign(dest, src any) error {
	switch d := dest.(type) {
	case sql.Scanner:
		return d.Scan(src)
	case *string:
		switch s := src.(type) {
		case string:
			*d = s
			return nil
		case []byte:
			*d = string(s)
			return nil
		}
	case *int64:
		if n, ok := src.(int64); ok {
			*d = n
			return nil
		}
	case *float64:
		switch n := src.(type) {
		case float64:
			*d = n
			return nil
		case int64:
			*d = float64(n)
			return nil
		}
	case *int:
		if n, ok := src.(int64); ok {
			*d = int(n)
			return nil
		}
	case *bool:
		if n, ok := src.(int64); ok {
			*d = n != 0
			return nil
		}
	case *[]byte:
		switch s := src.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = bytes.Clone(s)
			return nil
		case string:
			*d = []byte(s)
			return nil
		}
	}
	return fmt.Errorf("cannot store %T in %T", src, dest)
}
