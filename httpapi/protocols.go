package httpapi

import (
	"net/http"
	"strings"

	"github.com/forge-runtime/forge/protocol"
)

// Protocol is another wire protocol served under a path prefix over the
// same store and engine (OpenAI Responses, the AI SDK UI message stream).
// The server's guard (header limits, loopback Host and same-origin rules,
// JSON bodies) applies to it as to /v1; its handler authenticates with the
// env's Tenant.
type Protocol interface {
	// Prefix is the path prefix it serves, ending in "/".
	Prefix() string
	// Handler returns the handler of every path under Prefix.
	Handler(env protocol.Env) http.Handler
	// WriteError answers an error in the protocol's own error shape.
	WriteError(w http.ResponseWriter, status int, code, message string)
}

// mountProtocols adds each protocol's handler to mux.
func (s *Server) mountProtocols(mux *http.ServeMux) {
	env := protocol.Env{
		Store: s.store, Runtime: s.rt, Tenant: s.tenantFor, Decode: decodeBody, Classify: classify,
		Log: s.log, Clock: s.clock, IDs: s.ids, KeepAlive: s.keepAlive, OpenStream: s.streams.open,
		Files: s.files, MaxFileBytes: s.maxFileBytes,
	}
	for _, p := range s.protocols {
		h := p.Handler(env)
		mux.Handle(p.Prefix(), h)
		if exact := strings.TrimSuffix(p.Prefix(), "/"); exact != "" && exact != p.Prefix() {
			mux.Handle(exact, h) // /mcp as well as /mcp/ (no redirect for a POST)
		}
	}
}

// protocolFor returns the protocol serving r's path, nil for the Forge API.
func (s *Server) protocolFor(r *http.Request) Protocol {
	for _, p := range s.protocols {
		if strings.HasPrefix(r.URL.Path, p.Prefix()) || r.URL.Path == strings.TrimSuffix(p.Prefix(), "/") {
			return p
		}
	}
	return nil
}
