package httpapi_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/httpapi"
	"github.com/forge-runtime/forge/postgres"
	"github.com/forge-runtime/forge/postgres/pgtest"
	"github.com/forge-runtime/forge/sqlite"
)

// fileServer is the files API over store, on a real HTTP server.
func fileServer(b *testing.B, store forge.Store) string {
	b.Helper()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: store}).Handler())
	b.Cleanup(srv.Close)
	return srv.URL
}

func benchStores(b *testing.B, run func(b *testing.B, store forge.Store, db string)) {
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(context.Background(), b.TempDir()+"/forge.db")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close(context.Background()) })
		run(b, st, st.Path())
	})
	b.Run("postgres", func(b *testing.B) {
		if os.Getenv("FORGE_TEST_POSTGRES_URL") == "" {
			b.Skip("no PostgreSQL (run with ./scripts/test)")
		}
		db := pgtest.NewDatabase(b)
		st, err := postgres.Open(context.Background(), db, postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close(context.Background()) })
		run(b, st, db)
	})
}

// BenchmarkFileUpload20MiB uploads 20 MiB PDFs as raw bodies over HTTP:
// the whole path (spool and hash to a temporary file, sniff, store in
// 1 MiB chunks). fresh: new bytes each time; same: the bytes the store
// already holds (content-addressed: nothing but the file row is written).
//
//	./scripts/test --exec go test -run '^$' -bench FileUpload20MiB -benchtime 20x ./httpapi/
func BenchmarkFileUpload20MiB(b *testing.B) {
	benchStores(b, func(b *testing.B, store forge.Store, db string) {
		url := fileServer(b, store)
		body := make([]byte, 20<<20)
		copy(body, "%PDF-1.7\n")
		for _, mode := range []string{"fresh", "same"} {
			b.Run(mode, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if mode == "fresh" {
						_, _ = rand.Read(body[16:48])
					}
					resp, err := http.Post(url+"/v1/files?filename=big.pdf", "application/pdf", bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 201 {
						b.Fatalf("status %d", resp.StatusCode)
					}
				}
			})
		}
	})
}

// BenchmarkFileStorageAttachedTwice reports what the database holds for
// an image stored twice (two uploads, or two inline attachments, of the
// same bytes): the bytes of the file tables per image, against the
// image's own size (B/image vs content-B).
//
//	./scripts/test --exec go test -run '^$' -bench FileStorageAttachedTwice -benchtime 20x ./httpapi/
func BenchmarkFileStorageAttachedTwice(b *testing.B) {
	benchStores(b, func(b *testing.B, store forge.Store, db string) {
		url := fileServer(b, store)
		// Noise, so the PNG is as large as a photo's: 800x600 gray that
		// does not compress.
		noisy := make([]byte, 800*600)
		_, _ = rand.Read(noisy)
		var img []byte
		n := 0
		for b.Loop() {
			// A new image each iteration, stored twice.
			noisy[0]++
			img = noisyPNG(b, noisy)
			for range 2 {
				resp, err := http.Post(url+"/v1/files?filename=photo.png", "image/png", bytes.NewReader(img))
				if err != nil {
					b.Fatal(err)
				}
				var f forge.File
				_ = json.NewDecoder(resp.Body).Decode(&f)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			n++
		}
		size := fileTableBytes(b, store, db)
		b.ReportMetric(float64(size)/float64(n), "B/image")
		b.ReportMetric(float64(len(img)), "content-B")
	})
}

// fileTableBytes is what the file tables (and their indexes) take.
func fileTableBytes(b *testing.B, store forge.Store, db string) int64 {
	b.Helper()
	switch store.(type) {
	case *sqlite.Store:
		return sqliteTableBytes(b, db, "files", "file_blobs", "file_chunks", "files_blob")
	case *postgres.Store:
		c, err := pgx.Connect(context.Background(), db)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close(context.Background())
		var n int64
		err = c.QueryRow(context.Background(), `SELECT sum(pg_total_relation_size(c)) FROM
			unnest(ARRAY['forge.files', 'forge.file_blobs', 'forge.file_chunks']::regclass[]) c`).Scan(&n)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	b.Fatalf("store %T", store)
	return 0
}

func noisyPNG(b *testing.B, pix []byte) []byte {
	b.Helper()
	return encodeGray(b, 800, 600, pix)
}

func encodeGray(b *testing.B, w, h int, pix []byte) []byte {
	b.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	copy(img.Pix, pix)
	var out bytes.Buffer
	if err := png.Encode(&out, img); err != nil {
		b.Fatal(err)
	}
	return out.Bytes()
}

// sqliteTableBytes checkpoints the database at path (on a connection of
// its own) and sums the pages of the named tables and indexes (dbstat).
func sqliteTableBytes(b *testing.B, path string, names ...string) int64 {
	b.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var total int64
	for _, name := range names {
		var n sql.NullInt64
		if err := db.QueryRow(`SELECT sum(pgsize) FROM dbstat WHERE name = ?`, name).Scan(&n); err != nil {
			b.Fatal(err)
		}
		total += n.Int64
	}
	return total
}
