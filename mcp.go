package forge

import "fmt"

// MCPInitialized describes an MCP server that has just been started: the
// data of an mcp.initialized event, kept in the turn snapshot (extra.mcp).
type MCPInitialized struct {
	Server          string   `json:"server"`
	ProtocolVersion string   `json:"protocol_version"`
	Tools           []string `json:"tools"`
}

// AuthRequiredError is returned when an MCP server (streamable HTTP)
// answers 401: the turn pauses with an auth action. AuthURL is where the
// user can authorize, empty when the server advertised none.
type AuthRequiredError struct {
	Server  string
	AuthURL string
}

func (e *AuthRequiredError) Error() string {
	if e.AuthURL != "" {
		return fmt.Sprintf("MCP server %q requires authorization (see %s)", e.Server, e.AuthURL)
	}
	return fmt.Sprintf("MCP server %q requires authorization", e.Server)
}
