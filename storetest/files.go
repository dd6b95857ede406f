package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"

	"github.com/forge-runtime/forge"
)

// files returns the store's FileStore; the Files group runs only for
// stores that have one.
func (f *fixture) files() forge.FileStore {
	f.Helper()
	fs, ok := f.s.(forge.FileStore)
	if !ok {
		f.Skip("store has no FileStore")
	}
	return fs
}

// content returns n bytes of a pattern seeded by seed (so two seeds
// differ, and chunks of one content differ from each other).
func content(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i/4096) ^ seed
	}
	return b
}

func fileOf(tenant, name string, data []byte) *forge.File {
	sum := sha256.Sum256(data)
	return &forge.File{Tenant: tenant, Filename: name, MimeType: "application/pdf", Bytes: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), Purpose: "user_data"}
}

func (f *fixture) putFile(fs forge.FileStore, tenant, name string, data []byte) *forge.File {
	f.Helper()
	file := fileOf(tenant, name, data)
	f.ok(fs.CreateFile(f.ctx, file, bytes.NewReader(data)), "CreateFile "+name)
	return file
}

func (f *fixture) readFile(fs forge.FileStore, tenant, id string) ([]byte, error) {
	f.Helper()
	rc, err := fs.FileContent(f.ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// failingReader fails every read: content a store must not read.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) {
	return 0, errors.New("content read although the store holds it")
}

var fileTests = []test{
	{name: "RoundTripAcrossChunks", run: func(f *fixture) {
		fs := f.files()
		// Two and a half chunks, an exact chunk, and an empty file.
		for _, n := range []int{forge.FileChunkBytes*2 + forge.FileChunkBytes/2, forge.FileChunkBytes, 0} {
			data := content(n, byte(n))
			file := fileOf(tenantA, "doc.pdf", data)
			file.Width, file.Height = 3, 4
			f.ok(fs.CreateFile(f.ctx, file, bytes.NewReader(data)), "CreateFile")
			if file.ID == "" || file.CreatedAt.IsZero() || file.ID[:len(forge.PrefixFile)] != forge.PrefixFile {
				f.Fatalf("CreateFile set id %q, created_at %v", file.ID, file.CreatedAt)
			}
			got, err := fs.GetFile(f.ctx, tenantA, file.ID)
			f.ok(err, "GetFile")
			f.sameJSON(got, file, "stored file")
			eq(f, got.CreatedAt.Equal(file.CreatedAt), true, "created_at round-trips")
			back, err := f.readFile(fs, tenantA, file.ID)
			f.ok(err, "FileContent")
			if !bytes.Equal(back, data) {
				f.Fatalf("content of %d bytes read back as %d bytes, or different", n, len(back))
			}
		}
	}},
	{name: "SameBytesStoredOnceAndKeptWhileReferenced", run: func(f *fixture) {
		fs := f.files()
		data := content(forge.FileChunkBytes+10, 1)
		first := f.putFile(fs, tenantA, "a.pdf", data)
		// The store holds these bytes: it must not read them again.
		second := fileOf(tenantA, "b.pdf", data)
		f.ok(fs.CreateFile(f.ctx, second, failingReader{}), "CreateFile of stored bytes")
		if second.ID == first.ID {
			f.Fatal("two files got one id")
		}
		f.ok(fs.DeleteFile(f.ctx, tenantA, first.ID), "DeleteFile first")
		_, err := fs.GetFile(f.ctx, tenantA, first.ID)
		f.is(err, forge.ErrNotFound, "GetFile of a deleted file")
		back, err := f.readFile(fs, tenantA, second.ID)
		f.ok(err, "content of the file still having the bytes")
		eq(f, bytes.Equal(back, data), true, "content intact")
		f.ok(fs.DeleteFile(f.ctx, tenantA, second.ID), "DeleteFile second")
		f.is(fs.DeleteFile(f.ctx, tenantA, second.ID), forge.ErrNotFound, "DeleteFile twice")
		// The bytes went with the last file: storing them again reads them.
		third := fileOf(tenantA, "c.pdf", data)
		err = fs.CreateFile(f.ctx, third, failingReader{})
		if err == nil {
			f.Fatal("bytes outlived the last file having them: CreateFile did not read its content")
		}
		f.putFile(fs, tenantA, "c.pdf", data)
	}},
	{name: "ContentNotAsDeclaredStoresNothing", run: func(f *fixture) {
		fs := f.files()
		data := content(forge.FileChunkBytes+5, 2)
		for what, file := range map[string]*forge.File{
			"other hash": {Tenant: tenantA, Filename: "x", MimeType: "text/plain", Bytes: int64(len(data)), SHA256: hex.EncodeToString(make([]byte, 32))},
			"shorter":    fileOf(tenantA, "x", append(data, 'x')),
			"bad sha256": {Tenant: tenantA, Filename: "x", MimeType: "text/plain", Bytes: 1, SHA256: "ABC"},
			"no tenant":  fileOf("", "x", data),
			"negative":   {Tenant: tenantA, Filename: "x", MimeType: "text/plain", Bytes: -1, SHA256: hex.EncodeToString(make([]byte, 32))},
			"no type":    {Tenant: tenantA, Filename: "x", Bytes: 1, SHA256: hex.EncodeToString(make([]byte, 32))},
		} {
			f.is(fs.CreateFile(f.ctx, file, bytes.NewReader(data)), forge.ErrInvalid, "CreateFile, "+what)
		}
		longer := fileOf(tenantA, "x", data[:10])
		f.is(fs.CreateFile(f.ctx, longer, bytes.NewReader(data)), forge.ErrInvalid, "CreateFile, longer")
		list, _, err := fs.ListFiles(f.ctx, tenantA, forge.ListOptions{})
		f.ok(err, "ListFiles")
		eq(f, len(list), 0, "files stored by refused creates")
		// The refused content left no chunk the real bytes would be
		// mistaken for: they are read and stored whole.
		good := f.putFile(fs, tenantA, "x", data[:10])
		back, err := f.readFile(fs, tenantA, good.ID)
		f.ok(err, "FileContent")
		eq(f, bytes.Equal(back, data[:10]), true, "content after refused attempts")
	}},
	{name: "TenantsSeeOnlyTheirFiles", run: func(f *fixture) {
		fs := f.files()
		data := content(100, 3)
		a := f.putFile(fs, tenantA, "a.pdf", data)
		_, err := fs.GetFile(f.ctx, tenantB, a.ID)
		f.is(err, forge.ErrNotFound, "GetFile of another tenant's file")
		_, err = fs.FileContent(f.ctx, tenantB, a.ID)
		f.is(err, forge.ErrNotFound, "FileContent of another tenant's file")
		f.is(fs.DeleteFile(f.ctx, tenantB, a.ID), forge.ErrNotFound, "DeleteFile of another tenant's file")
		list, _, err := fs.ListFiles(f.ctx, tenantB, forge.ListOptions{})
		f.ok(err, "ListFiles")
		eq(f, len(list), 0, "another tenant's files listed")
		// The same bytes in another tenant are that tenant's own copy: the
		// store reads them (no content is shared across tenants).
		err = fs.CreateFile(f.ctx, fileOf(tenantB, "b.pdf", data), failingReader{})
		if err == nil {
			f.Fatal("a tenant's file was made from another tenant's bytes without reading its content")
		}
		b := f.putFile(fs, tenantB, "b.pdf", data)
		f.ok(fs.DeleteFile(f.ctx, tenantB, b.ID), "DeleteFile B")
		back, err := f.readFile(fs, tenantA, a.ID)
		f.ok(err, "A's content after B deleted the same bytes")
		eq(f, bytes.Equal(back, data), true, "A's content intact")
	}},
	{name: "ListPages", run: func(f *fixture) {
		fs := f.files()
		var want []string
		for i := range 5 {
			want = append(want, f.putFile(fs, tenantA, "f", content(10, byte(i))).ID)
		}
		got := f.filePages(fs, 2)
		f.sameJSON(got, [][]string{want[:2], want[2:4], want[4:]}, "pages of files")
	}},
}

func (f *fixture) filePages(fs forge.FileStore, limit int) [][]string {
	f.Helper()
	return pages(f, limit, func(o forge.ListOptions) ([]*forge.File, string, error) {
		return fs.ListFiles(f.ctx, tenantA, o)
	}, func(x *forge.File) string { return x.ID })
}
