package parts_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/parts"
)

// TestMentions: a mention is "@" and a whole subagent name, not inside a
// word; offsets are UTF-16 code units, "@" included.
func TestMentions(t *testing.T) {
	t.Parallel()
	names := []string{"writer", "re.search", "a-b"}
	cases := []struct {
		text string
		want []forge.AgentData
	}{
		{"@writer", []forge.AgentData{{Name: "writer", Start: 0, End: 7}}},
		{"hi @writer.", []forge.AgentData{{Name: "writer", Start: 3, End: 10}}},
		{"(@writer), @a-b!", []forge.AgentData{{Name: "writer", Start: 1, End: 8}, {Name: "a-b", Start: 11, End: 15}}},
		{"ask @re.search...", []forge.AgentData{{Name: "re.search", Start: 4, End: 14}}},
		{"😀@writer", []forge.AgentData{{Name: "writer", Start: 2, End: 9}}},     // an astral rune is two units
		{"é\xff@writer", []forge.AgentData{{Name: "writer", Start: 2, End: 9}}}, // a byte that is not UTF-8 is one
		{"@@writer", []forge.AgentData{{Name: "writer", Start: 1, End: 8}}},
		{"@writer@host", nil},
		{"@writer @writer", []forge.AgentData{{Name: "writer", Start: 0, End: 7}}}, // once
		{"a@writer.com", nil},
		{"é@writer", nil},
		{"@writer2 @writer_x @writer-b @writer.com @writeré", nil},
		{"@Writer @wri @re", nil},
		{"@", nil},
		{"writer", nil},
		{"\xff@\xff", nil},
	}
	for _, c := range cases {
		if got := parts.Mentions(c.text, names); !slices.Equal(got, c.want) {
			t.Errorf("Mentions(%q) = %+v, want %+v", c.text, got, c.want)
		}
	}
	if got := parts.Mentions("@writer", nil); got != nil {
		t.Errorf("no subagents: %+v", got)
	}
}

// TestMentionsAreBounded: a huge message mentioning many subagents over
// and over yields one mention per subagent, at most MaxAgentParts.
func TestMentionsAreBounded(t *testing.T) {
	t.Parallel()
	var names []string
	var b strings.Builder
	for i := range 40 {
		names = append(names, fmt.Sprintf("s%d", i))
	}
	for b.Len() < 4<<20 {
		for _, n := range names {
			b.WriteString("@" + n + " \xff")
		}
	}
	got := parts.Mentions(b.String(), names)
	if len(got) != parts.MaxAgentParts || got[0].Name != "s0" || got[parts.MaxAgentParts-1].Name != names[parts.MaxAgentParts-1] {
		t.Fatalf("%d mentions: %+v", len(got), got)
	}
	if got := parts.Mentions(strings.Repeat("@s1", 1<<20), names); len(got) != 0 {
		t.Fatalf("@s1@s1... is one long token: %+v", got)
	}
	if got := parts.Mentions(strings.Repeat("@s1 ", 1<<20), names[:2]); len(got) != 1 {
		t.Fatalf("repeated mentions of one subagent: %d", len(got))
	}
}

// TestAgentPartRender: a mention asks the model (in a user message) to
// delegate; a forum copy's agent part (a name in its text, no data) is
// not shown.
func TestAgentPartRender(t *testing.T) {
	t.Parallel()
	user, asst := &forge.Message{Role: forge.RoleUser}, &forge.Message{Role: forge.RoleAssistant}
	data, _ := json.Marshal(forge.AgentData{Name: "writer", Start: 0, End: 7})
	p := &forge.Part{Type: forge.PartAgent, Data: data}
	out := parts.Render(user, p, nil)
	if len(out) != 1 || out[0].Type != forge.ModelPartText || out[0].Text != parts.DelegationRequest("writer") ||
		!strings.Contains(out[0].Text, "call the subagent_writer tool") {
		t.Fatalf("rendered %+v", out)
	}
	if parts.Chars(p) != int64(len(out[0].Text)) {
		t.Errorf("chars %d", parts.Chars(p))
	}
	forum := &forge.Part{Type: forge.PartAgent, Text: "writer"}
	if len(parts.Render(asst, p, nil)) != 0 || len(parts.Render(user, forum, nil)) != 0 || parts.Chars(forum) != 0 {
		t.Error("an agent part shown outside a user message, or a forum copy's shown")
	}
}

// BenchmarkMentions scans a 1 MiB message dense with "@" (the floor:
// strings.Count of "@" over it, BenchmarkMentionsFloor).
func BenchmarkMentions(b *testing.B) {
	text, names := mentionBenchText()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		parts.Mentions(text, names)
	}
}

func BenchmarkMentionsFloor(b *testing.B) {
	text, _ := mentionBenchText()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		strings.Count(text, "@")
	}
}

func mentionBenchText() (string, []string) {
	names := []string{"writer", "researcher"}
	return strings.Repeat("mail a@b.com about @nobody, é😀 ", 1<<20/36), names
}
