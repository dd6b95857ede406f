package anthropic

import "testing"

func TestModelVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id           string
		major, minor int
		ok, adaptive bool
		maxTokens    int64
	}{
		{"claude-sonnet-4-6", 4, 6, true, true, 16384},
		{"claude-haiku-4-5-20251001", 4, 5, true, false, 16384},
		{"claude-sonnet-4-20250514", 4, 0, true, false, 16384},
		{"claude-opus-4-1-20250805", 4, 1, true, false, 16384},
		{"claude-3-7-sonnet-20250219", 3, 7, true, false, 16384},
		{"claude-3-5-haiku-latest", 3, 5, true, false, 8192},
		{"claude-3-opus-20240229", 3, 0, true, false, 4096},
		{"claude-opus-5", 5, 0, true, true, 16384},
		{"claude-fable-5-1", 5, 1, true, true, 16384},
		{"us.anthropic.claude-opus-4-6-v1", 4, 6, true, true, 16384},
		{"anthropic.claude-3-5-sonnet-20240620-v1:0", 3, 5, true, false, 8192},
		{"claude-mythos-preview", 0, 0, false, true, 4096},
		{"my-proxy-model", 0, 0, false, false, 4096},
	}
	for _, tt := range tests {
		major, minor, ok := modelVersion(tt.id)
		if major != tt.major || minor != tt.minor || ok != tt.ok {
			t.Errorf("modelVersion(%q) = %d, %d, %v", tt.id, major, minor, ok)
		}
		if a := adaptiveThinking(tt.id); a != tt.adaptive {
			t.Errorf("adaptiveThinking(%q) = %v", tt.id, a)
		}
		if m := defaultMaxTokens(tt.id); m != tt.maxTokens {
			t.Errorf("defaultMaxTokens(%q) = %d", tt.id, m)
		}
	}
}
