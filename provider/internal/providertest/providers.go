package providertest

// The adapters of Forge's providers. To add a provider: give it a fake
// that implements Fake (a loopback server speaking its wire format, see
// openaitest), an adapter here, listed in All, and a TestConformance in
// its package calling Run.

import (
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/provider"
	"github.com/forge-runtime/forge/provider/anthropic"
	"github.com/forge-runtime/forge/provider/anthropic/anthropictest"
	"github.com/forge-runtime/forge/provider/internal/fakeapi"
	"github.com/forge-runtime/forge/provider/openai"
	"github.com/forge-runtime/forge/provider/openai/openaitest"
)

// All is every provider, for the cases of the registry's wrapper.
func All() []Provider {
	return []Provider{OpenAIChat(), OpenAIResponses(), Anthropic(), Scripted()}
}

// openAIEnv is what the OpenAI SDK reads from the environment.
var openAIEnv = map[string]string{
	"OPENAI_BASE_URL":   "http://127.0.0.1:1/v1",
	"OPENAI_API_KEY":    "sk-from-env",
	"OPENAI_ORG_ID":     "org-from-env",
	"OPENAI_PROJECT_ID": "proj-from-env",
}

// OpenAIChat is the Chat Completions provider against openaitest.
func OpenAIChat() Provider {
	return Provider{
		Name: "openai-chat", Kind: provider.KindOpenAI, ModelID: "gpt-4.1-mini", Env: openAIEnv,
		ToolResultFilesAsUser: true,
		Start:                 func(t testing.TB) Fake { return chatFake{openaitest.New(t)} },
		Model: func(c Config) forge.Model {
			return openai.New(openai.Config{Name: c.Name, APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: c.HTTPClient}).Model(c.Model)
		},
		Unsupported: map[string]string{
			"Stream/TwoTextBlocks":       "a choice streams one content: two text blocks are one",
			"Stream/UsageCacheWrite":     "the API reports no cache writes",
			"Reliability/CostCacheWrite": "the API reports no cache writes",
			"Request/ToolResultError":    "a tool message has no error flag",
			"Request/ReasoningReplay":    "Chat Completions takes no reasoning back",
		},
	}
}

// OpenAIResponses is the Responses API provider against openaitest.
func OpenAIResponses() Provider {
	return Provider{
		Name: "openai-responses", Kind: provider.KindOpenAIResponses, ModelID: "gpt-5-mini", Env: openAIEnv,
		Start: func(t testing.TB) Fake { return responsesFake{openaitest.New(t)} },
		Model: func(c Config) forge.Model {
			return openai.NewResponses(openai.Config{Name: c.Name, APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: c.HTTPClient}).Model(c.Model)
		},
		Unsupported: map[string]string{
			"Stream/UsageCacheWrite":     "the API reports no cache writes",
			"Reliability/CostCacheWrite": "the API reports no cache writes",
			"Request/ToolResultError":    "a function_call_output has no error flag",
		},
	}
}

// Anthropic is the Messages API provider against anthropictest.
func Anthropic() Provider {
	return Provider{
		Name: "anthropic", Kind: provider.KindAnthropic, ModelID: "claude-sonnet-4-5",
		Env: map[string]string{
			"ANTHROPIC_BASE_URL":       "http://127.0.0.1:1",
			"ANTHROPIC_API_KEY":        "sk-ant-from-env",
			"ANTHROPIC_AUTH_TOKEN":     "token-from-env",
			"ANTHROPIC_CUSTOM_HEADERS": "X-From-Env: from-env-header",
		},
		Start: func(t testing.TB) Fake { return anthropictest.New(t) },
		Model: func(c Config) forge.Model {
			return anthropic.New(anthropic.Config{Name: c.Name, APIKey: c.APIKey, BaseURL: c.BaseURL, HTTPClient: c.HTTPClient}).Model(c.Model)
		},
		Unsupported: map[string]string{
			"Request/Temperature": "the API version Forge sends (2026-10-21) refuses sampling parameters: none is sent",
			"Request/NoMaxTokens": "max_tokens is required: the model's default is sent",
		},
	}
}

type chatFake struct{ *openaitest.Server }

func (f chatFake) Received() []fakeapi.Request { return f.ChatReceived() }

type responsesFake struct{ *openaitest.Server }

func (f responsesFake) Received() []fakeapi.Request { return f.ResponsesReceived() }
