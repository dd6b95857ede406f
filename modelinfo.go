package forge

import "math"

// ModelInfo is what a server knows about one "provider/model": the
// settings the engine needs (context window, output limit) and the prices
// cost is computed with. GET /v1/models lists them.
type ModelInfo struct {
	ID            string  `json:"id"` // provider/model
	Provider      string  `json:"provider"`
	Model         string  `json:"model"` // the id sent to the provider
	ContextWindow int64   `json:"context_window"`
	MaxOutput     int64   `json:"max_output"`
	Prices        *Prices `json:"prices"` // nil (null): unknown, cost is not computed
	// InputModalities are the kinds of input the model takes ("text",
	// "image", "pdf"); absent (nil): unknown, and every kind is accepted.
	InputModalities []string `json:"input_modalities,omitempty"`
	// Source tells where the figures come from: "builtin" (the built-in
	// table), "config" (the config file, over the built-in entry, if any)
	// or "default" (nothing known).
	Source string `json:"source"`
}

// ProviderInfo describes a configured model provider. It never holds a key.
type ProviderInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	BaseURL string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable the key is read from.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// APIKeySet tells whether that variable held a key.
	APIKeySet bool `json:"api_key_set"`
	// Headers are the names of the configured extra headers.
	Headers []string `json:"headers,omitempty"`
	// Source is where the provider comes from: config (the file), env (the
	// conventional variables), builtin (scripted) or custom (registered in
	// code).
	Source string `json:"source"`
	// Problem tells why the provider cannot be used ("" when it can).
	Problem string `json:"problem,omitempty"`
}

// Prices are in US dollars per million tokens.
type Prices struct {
	Input       float64 `json:"input"`
	Output      float64 `json:"output"`
	CachedInput float64 `json:"cached_input"`
	// CacheWrite is what writing a prompt cache entry costs (Anthropic);
	// 0 charges cache writes at the input price.
	CacheWrite float64 `json:"cache_write,omitempty"`
}

// Cost is the dollar cost of u, read with the convention every provider
// reports Usage in: InputTokens is the whole prompt, cache reads and cache
// writes included (provider/anthropic adds the API's cache figures to its
// input_tokens); OutputTokens is the whole completion, reasoning included.
// So: uncached input at the input price, cache reads at the cached-input
// price, cache writes at the cache-write price (the input price when none),
// output at the output price. ReasoningTokens is a breakdown of
// OutputTokens and is not charged twice.
func (p *Prices) Cost(u Usage) float64 {
	if p == nil {
		return 0
	}
	cacheRead := max(u.CacheReadTokens, 0)
	cacheWrite := max(u.CacheWriteTokens, 0)
	uncached := max(u.InputTokens-cacheRead-cacheWrite, 0)
	writePrice := p.CacheWrite
	if writePrice == 0 {
		writePrice = p.Input
	}
	c := float64(uncached)*p.Input +
		float64(cacheRead)*p.CachedInput +
		float64(cacheWrite)*writePrice +
		float64(max(u.OutputTokens, 0))*p.Output
	// Per million, rounded to a millionth of a dollar so sums stay tidy.
	return math.Round(c) / 1e6
}
