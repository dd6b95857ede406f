package openairesp

import (
	"net/http"
	"strconv"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/internal/files"
)

// The OpenAI Files API over Forge's files (API.md): the same store as
// /v1/files, in OpenAI's shapes, so client.Files.New works.

// fileObject is OpenAI's file object.
type fileObject struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	Bytes     int64   `json:"bytes"`
	CreatedAt int64   `json:"created_at"`
	Filename  string  `json:"filename"`
	Purpose   string  `json:"purpose"`
	Status    string  `json:"status"`
	ExpiresAt *int64  `json:"expires_at"`
	Details   *string `json:"status_details"`
}

func fileObjectOf(f *forge.File) fileObject {
	purpose := f.Purpose
	if purpose == "" {
		purpose = "user_data"
	}
	return fileObject{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Filename: f.Filename,
		Purpose: purpose, Status: "processed"}
}

func (h *handler) fileStore() (forge.FileStore, error) {
	if h.env.Files == nil {
		return nil, &apiError{Status: http.StatusNotImplemented, Code: "not_implemented", Msg: "this server's store keeps no files"}
	}
	return h.env.Files, nil
}

// createFile serves POST /files.
func (h *handler) createFile(w http.ResponseWriter, r *http.Request, tenant string, _ []string) error {
	fs, err := h.fileStore()
	if err != nil {
		return err
	}
	f, err := files.Upload(r.Context(), w, r, fs, tenant, h.env.MaxFileBytes)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, fileObjectOf(f))
	return nil
}

// listFiles serves GET /files (?after, ?limit; oldest first).
func (h *handler) listFiles(w http.ResponseWriter, r *http.Request, tenant string, _ []string) error {
	fs, err := h.fileStore()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return &apiError{Status: http.StatusBadRequest, Param: "limit", Code: "invalid_request", Msg: "limit is an integer from 1 to 10000"}
		}
		limit = n
	}
	list, next, err := fs.ListFiles(r.Context(), tenant, forge.ListOptions{Limit: limit, Cursor: q.Get("after")})
	if err != nil {
		return err
	}
	data := make([]fileObject, 0, len(list))
	for _, f := range list {
		data = append(data, fileObjectOf(f))
	}
	body := map[string]any{"object": "list", "data": data, "has_more": next != ""}
	if len(data) > 0 {
		body["first_id"], body["last_id"] = data[0].ID, data[len(data)-1].ID
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// getFile serves GET /files/{id}.
func (h *handler) getFile(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	fs, err := h.fileStore()
	if err != nil {
		return err
	}
	f, err := fs.GetFile(r.Context(), tenant, args[0])
	if err != nil {
		return fileNotFound(err, args[0])
	}
	writeJSON(w, http.StatusOK, fileObjectOf(f))
	return nil
}

// fileContent serves GET /files/{id}/content.
func (h *handler) fileContent(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	fs, err := h.fileStore()
	if err != nil {
		return err
	}
	if err := files.ServeContent(r.Context(), w, fs, tenant, args[0]); err != nil {
		return fileNotFound(err, args[0])
	}
	return nil
}

// deleteFile serves DELETE /files/{id}.
func (h *handler) deleteFile(w http.ResponseWriter, r *http.Request, tenant string, args []string) error {
	fs, err := h.fileStore()
	if err != nil {
		return err
	}
	if err := fs.DeleteFile(r.Context(), tenant, args[0]); err != nil {
		return fileNotFound(err, args[0])
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": args[0], "object": "file", "deleted": true})
	return nil
}

func fileNotFound(err error, id string) error {
	return notFound(err, "file_id", "not_found", "No such File object: %s", id)
}
