package provider

import (
	"regexp"

	"github.com/forge-runtime/forge"
)

// Settings of a model id the server knows nothing about.
const (
	DefaultContextWindow = 128000
	DefaultMaxOutput     = 4096
)

// Where a ModelInfo's figures come from.
const (
	SourceBuiltin = "builtin" // the built-in table
	SourceConfig  = "config"  // the config file (over the built-in entry, if any)
	SourceDefault = "default" // nothing known: DefaultContextWindow, DefaultMaxOutput, no prices
)

// ModelInfo, ProviderInfo and Prices live in the root package (so that
// packages listing models, such as httpapi, need not link the provider
// SDKs); these aliases keep the provider.X spellings working.
type (
	ModelInfo    = forge.ModelInfo
	ProviderInfo = forge.ProviderInfo
	Prices       = forge.Prices
)

type builtinModel struct {
	contextWindow, maxOutput int64
	prices                   Prices
}

// Built-in settings of well-known models, by provider kind and model id.
//
// The prices are the vendors' public list prices in US dollars per million
// tokens, as known to us when this table was written (standard tier, no
// batch or priority pricing, Anthropic's 5-minute cache writes, the base
// price of models whose price rises above a prompt size). They go stale:
// override them, and declare the models you use that are not here, in the
// config file (see Config). Context windows and output limits are the
// vendors' documented defaults (beta extensions, such as Anthropic's 1M
// context, are not assumed).
var builtinModels = map[string]map[string]builtinModel{
	KindOpenAI: {
		"gpt-5":        {400000, 128000, Prices{Input: 1.25, Output: 10, CachedInput: 0.125}},
		"gpt-5-mini":   {400000, 128000, Prices{Input: 0.25, Output: 2, CachedInput: 0.025}},
		"gpt-5-nano":   {400000, 128000, Prices{Input: 0.05, Output: 0.40, CachedInput: 0.005}},
		"gpt-4.1":      {1047576, 32768, Prices{Input: 2, Output: 8, CachedInput: 0.50}},
		"gpt-4.1-mini": {1047576, 32768, Prices{Input: 0.40, Output: 1.60, CachedInput: 0.10}},
		"gpt-4.1-nano": {1047576, 32768, Prices{Input: 0.10, Output: 0.40, CachedInput: 0.025}},
		"gpt-4o":       {128000, 16384, Prices{Input: 2.50, Output: 10, CachedInput: 1.25}},
		"gpt-4o-mini":  {128000, 16384, Prices{Input: 0.15, Output: 0.60, CachedInput: 0.075}},
		"o3":           {200000, 100000, Prices{Input: 2, Output: 8, CachedInput: 0.50}},
		"o3-mini":      {200000, 100000, Prices{Input: 1.10, Output: 4.40, CachedInput: 0.55}},
		"o4-mini":      {200000, 100000, Prices{Input: 1.10, Output: 4.40, CachedInput: 0.275}},
		"o1":           {200000, 100000, Prices{Input: 15, Output: 60, CachedInput: 7.50}},
	},
	KindAnthropic: {
		"claude-opus-4-5":   {200000, 64000, Prices{Input: 5, Output: 25, CachedInput: 0.50, CacheWrite: 6.25}},
		"claude-opus-4-1":   {200000, 32000, Prices{Input: 15, Output: 75, CachedInput: 1.50, CacheWrite: 18.75}},
		"claude-opus-4-0":   {200000, 32000, Prices{Input: 15, Output: 75, CachedInput: 1.50, CacheWrite: 18.75}},
		"claude-sonnet-4-5": {200000, 64000, Prices{Input: 3, Output: 15, CachedInput: 0.30, CacheWrite: 3.75}},
		"claude-sonnet-4-0": {200000, 64000, Prices{Input: 3, Output: 15, CachedInput: 0.30, CacheWrite: 3.75}},
		"claude-3-7-sonnet": {200000, 64000, Prices{Input: 3, Output: 15, CachedInput: 0.30, CacheWrite: 3.75}},
		"claude-haiku-4-5":  {200000, 64000, Prices{Input: 1, Output: 5, CachedInput: 0.10, CacheWrite: 1.25}},
		"claude-3-5-haiku":  {200000, 8192, Prices{Input: 0.80, Output: 4, CachedInput: 0.08, CacheWrite: 1}},
	},
}

// builtinAliases maps other spellings to a table entry.
var builtinAliases = map[string]map[string]string{
	KindAnthropic: {
		"claude-opus-4":   "claude-opus-4-0",
		"claude-sonnet-4": "claude-sonnet-4-0",
	},
}

// A dated snapshot (gpt-4.1-2025-04-14, claude-sonnet-4-5-20250929) or a
// "-latest" alias has the settings of its family.
var snapshotSuffix = regexp.MustCompile(`-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$`)

// lookupBuiltin finds model id in the table of kind.
func lookupBuiltin(kind, id string) (builtinModel, bool) {
	if kind == KindOpenAIResponses {
		kind = KindOpenAI
	}
	table := builtinModels[kind]
	if table == nil {
		return builtinModel{}, false
	}
	find := func(cand string) (builtinModel, bool) {
		if a, ok := builtinAliases[kind][cand]; ok {
			cand = a
		}
		m, ok := table[cand]
		return m, ok
	}
	if m, ok := find(id); ok {
		return m, true
	}
	// The suffix is stripped only when the id itself is not in the table:
	// the regexp costs more than the rest of a turn's model lookup.
	return find(snapshotSuffix.ReplaceAllString(id, ""))
}

// Input kinds (forge.ModelInfo.InputModalities).
const (
	InputText  = "text"
	InputImage = "image"
	InputPDF   = "pdf"
)

// textOnlyModels are the built-in models that take no image nor PDF.
var textOnlyModels = map[string]bool{"o3-mini": true}

// builtinInputs is what a built-in model takes: every model of the table
// takes text, images and PDFs but those of textOnlyModels.
func builtinInputs(kind, id string) []string {
	if kind == KindOpenAIResponses {
		kind = KindOpenAI
	}
	if textOnlyModels[snapshotSuffix.ReplaceAllString(id, "")] {
		return []string{InputText}
	}
	return []string{InputText, InputImage, InputPDF}
}

// builtinIDs lists the table's ids for kind.
func builtinIDs(kind string) []string {
	if kind == KindOpenAIResponses {
		kind = KindOpenAI
	}
	ids := make([]string, 0, len(builtinModels[kind]))
	for id := range builtinModels[kind] {
		ids = append(ids, id)
	}
	return ids
}

// info builds the ModelInfo of id under provider p: defaults, then the
// built-in entry for p's kind, then the config file's entry.
func (p *entry) info(id string) ModelInfo {
	mi := ModelInfo{ID: p.name + "/" + id, Provider: p.name, Model: id,
		ContextWindow: DefaultContextWindow, MaxOutput: DefaultMaxOutput, Source: SourceDefault}
	if b, ok := lookupBuiltin(p.kind, id); ok {
		pr := b.prices
		mi.ContextWindow, mi.MaxOutput, mi.Prices, mi.Source = b.contextWindow, b.maxOutput, &pr, SourceBuiltin
		mi.InputModalities = builtinInputs(p.kind, id)
	}
	if p.kind == KindScripted {
		mi.Prices, mi.Source = &Prices{}, SourceBuiltin
	}
	if mc, ok := p.models[id]; ok {
		mi.Source = SourceConfig
		if mc.ContextWindow != nil {
			mi.ContextWindow = *mc.ContextWindow
		}
		if mc.MaxOutput != nil {
			mi.MaxOutput = *mc.MaxOutput
		}
		if mc.InputModalities != nil {
			mi.InputModalities = append([]string(nil), mc.InputModalities...)
		}
		if mc.Prices != nil {
			pr := Prices{}
			if mi.Prices != nil {
				pr = *mi.Prices
			}
			mc.Prices.apply(&pr, mi.Prices != nil)
			mi.Prices = &pr
		}
		if mi.MaxOutput > mi.ContextWindow {
			mi.MaxOutput = mi.ContextWindow
		}
	}
	return mi
}
