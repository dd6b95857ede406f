package forum

import (
	"slices"
	"testing"
)

func TestMentions(t *testing.T) {
	t.Parallel()
	members := map[string]bool{"support": true, "support-bot": true, "sales": true, "a_b": true}
	cases := []struct {
		text string
		want []string
	}{
		{"hi @support", []string{"support"}},
		{"@support-bot, hi", []string{"support-bot"}},            // the longest run that names a member
		{"@support-team please", []string{"support"}},            // a shorter run names one
		{"@sales @sales @support", []string{"sales", "support"}}, // once each, in order
		{"mail@support and x@sales", []string{}},                 // '@' inside a word is no mention
		{"@nobody @ @@sales", []string{"sales"}},                 // unknown names and bare '@'
		{"(@a_b)", []string{"a_b"}},                              // punctuation around
		{"@SALES", []string{}},                                   // names are case-sensitive
		{"\xff@sales\x00", []string{"sales"}},                    // bytes that are not text
		{"", []string{}},
	}
	for _, c := range cases {
		if got := Mentions(c.text, members); !slices.Equal(got, c.want) {
			t.Errorf("Mentions(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}
