package forge_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/forge-runtime/forge"
)

// TestModelRequestClone: a clone keeps its messages, parts and tools when
// the request's arrays are reused (as the engine reuses them for the next
// call of a thread).
func TestModelRequestClone(t *testing.T) {
	req := &forge.ModelRequest{Model: "m", System: "s",
		Messages: []forge.ModelMessage{
			{Role: forge.RoleUser, Parts: []forge.ModelPart{{Type: forge.ModelPartText, Text: "hi"}}},
			{Role: forge.RoleAssistant, Parts: []forge.ModelPart{{Type: forge.ModelPartToolCall, CallID: "call_1", Arguments: json.RawMessage(`{}`)}}},
			{Role: forge.RoleTool},
		},
		Tools: []forge.ToolDef{{Name: "t"}}}
	c := req.Clone()
	if !reflect.DeepEqual(c, req) {
		t.Fatalf("clone %+v differs from %+v", c, req)
	}
	req.Messages[0].Parts[0].Text = "changed"
	req.Messages[1] = forge.ModelMessage{Role: forge.RoleUser}
	req.Tools[0].Name = "changed"
	if c.Messages[0].Parts[0].Text != "hi" || c.Messages[1].Role != forge.RoleAssistant || c.Tools[0].Name != "t" {
		t.Fatalf("the clone changed with the request: %+v", c)
	}
}
