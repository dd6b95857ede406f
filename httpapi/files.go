package httpapi

import (
	"net/http"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
)

// DefaultMaxFileBytes is the default limit of one file (--max-file-bytes).
const DefaultMaxFileBytes = files.DefaultMaxBytes

// fileStore returns the store's files, or answers that this server keeps
// none.
func (s *Server) fileStore() (forge.FileStore, error) {
	if s.files == nil {
		return nil, forge.Errorf(errNotImplemented, "this server's store keeps no files")
	}
	return s.files, nil
}

// isUpload reports whether r is a file upload, whose body is the file
// (multipart or raw) rather than JSON.
func isUpload(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/v1/files" || r.URL.Path == "/openai/v1/files")
}

func (s *Server) createFile(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.fileStore()
	if err != nil {
		return err
	}
	f, err := files.Upload(r.Context(), w, r, fs, tenantOf(r), s.maxFileBytes)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/files/"+f.ID)
	writeJSON(w, http.StatusCreated, f)
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.fileStore()
	if err != nil {
		return err
	}
	opts, err := listOptions(r.URL.Query(), defaultListLimit)
	if err != nil {
		return err
	}
	list, next, err := fs.ListFiles(r.Context(), tenantOf(r), opts)
	if err != nil {
		return err
	}
	writeList(w, list, next)
	return nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.fileStore()
	if err != nil {
		return err
	}
	f, err := fs.GetFile(r.Context(), tenantOf(r), r.PathValue("fid"))
	if err != nil {
		return notFound(err, "file", r.PathValue("fid"))
	}
	writeJSON(w, http.StatusOK, f)
	return nil
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.fileStore()
	if err != nil {
		return err
	}
	if err := files.ServeContent(r.Context(), w, fs, tenantOf(r), r.PathValue("fid")); err != nil {
		return notFound(err, "file", r.PathValue("fid"))
	}
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	fs, err := s.fileStore()
	if err != nil {
		return err
	}
	id := r.PathValue("fid")
	if err := fs.DeleteFile(r.Context(), tenantOf(r), id); err != nil {
		return notFound(err, "file", id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
