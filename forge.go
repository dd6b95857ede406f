// Package forge is the domain of the Forge agent runtime: agents, sessions,
// turns, threads, messages, parts and events, and the small interfaces the
// rest of the system is built from (Store, Model, Tool).
//
// The root package imports no SDK and no database driver; backends live in
// sub-packages named after what they wrap (sqlite, provider/openai, ...).
package forge

import "time"

// DefaultTenant is the tenant used when the server runs without API keys.
const DefaultTenant = "default"

// Clock tells the time. Injected so tests are deterministic.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock, in UTC.
type SystemClock struct{}

// Now returns the current UTC time.
func (SystemClock) Now() time.Time { return time.Now().UTC() }

// Usage is token accounting for one model step, or a sum over many.
type Usage struct {
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens,omitempty"`
	CacheReadTokens  int64   `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64   `json:"cache_write_tokens,omitempty"`
	Cost             float64 `json:"cost"`
	// Estimated marks usage Forge estimated (about 4 characters a token)
	// because the provider reported none: a step cancelled, cut or failed
	// after the request was sent. A sum with any estimated part is
	// estimated.
	Estimated bool `json:"estimated,omitempty"`
}

// Add accumulates o into u.
func (u *Usage) Add(o Usage) {
	u.InputTokens += o.InputTokens
	u.OutputTokens += o.OutputTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.CacheReadTokens += o.CacheReadTokens
	u.CacheWriteTokens += o.CacheWriteTokens
	u.Cost += o.Cost
	u.Estimated = u.Estimated || o.Estimated
}
