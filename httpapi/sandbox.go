package httpapi

import "net/http"

type restoreBody struct {
	Snapshot string `json:"snapshot"`
}

// restoreWorkspace restores the session's sandbox files to a workspace
// snapshot a step kept (the `snapshot` of its step-finish part): 200 with
// what it did. 409 turn_in_progress while a turn runs; 404 for a snapshot
// the session does not have. Restoring twice is restoring once, so no
// Idempotency-Key is needed.
func (s *Server) restoreWorkspace(w http.ResponseWriter, r *http.Request) error {
	var body restoreBody
	if err := decodeBody(w, r, &body, true); err != nil {
		return err
	}
	ses, err := s.session(r)
	if err != nil {
		return err
	}
	if body.Snapshot == "" {
		return invalid("snapshot is required: the id a step-finish part names (snap_...)")
	}
	res, err := s.rt.RestoreWorkspace(r.Context(), tenantOf(r), ses.ID, body.Snapshot)
	if err != nil {
		return notFound(err, "session", ses.ID)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// listWorkspaceSnapshots lists the workspace snapshots the session's
// sandbox keeps, oldest first: {"data": [{"id", "created_at"}]}. A session
// whose agent never touched a sandbox (or a server without sandboxes)
// lists none.
func (s *Server) listWorkspaceSnapshots(w http.ResponseWriter, r *http.Request) error {
	sid := r.PathValue("sid")
	list, err := s.rt.WorkspaceSnapshots(r.Context(), tenantOf(r), sid)
	if err != nil {
		return notFound(err, "session", sid)
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": list})
	return nil
}
