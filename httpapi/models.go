package httpapi

import (
	"net/http"

	"github.com/forge-runtime/forge"
)

// ModelCatalog is what GET /v1/models lists; *provider.Registry implements
// it (httpapi does not import provider, which links the model SDKs).
// Neither method may return a key.
type ModelCatalog interface {
	// Providers describes the configured providers (kind, base URL, the
	// name of the key's variable, never the key).
	Providers() []forge.ProviderInfo
	// KnownModels lists the models with known settings (context window,
	// max output, prices).
	KnownModels() []forge.ModelInfo
	// CheckModel tells whether an agent may run on the model with params:
	// its provider is configured and usable, and its parameters are valid
	// for it (a scripted script). Errors wrap forge.ErrInvalid and say
	// what is configured.
	CheckModel(name string, params forge.ModelParams) error
}

// modelsPage is the answer of GET /v1/models: the known models as data,
// the providers beside them. The list is short and not paginated.
type modelsPage struct {
	Data       []forge.ModelInfo    `json:"data"`
	Providers  []forge.ProviderInfo `json:"providers"`
	NextCursor *string              `json:"next_cursor"`
}

// listModels answers GET /v1/models. Without a catalog both lists are
// empty.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) error {
	page := modelsPage{Data: []forge.ModelInfo{}, Providers: []forge.ProviderInfo{}}
	if s.models != nil {
		if m := s.models.KnownModels(); m != nil {
			page.Data = m
		}
		if p := s.models.Providers(); p != nil {
			page.Providers = p
		}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
