package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/forge-runtime/forge"
)

// Todo is the task-list capability: the agent keeps a list of tasks across
// turns with todo_write (replace the whole list) and todo_read. Its state
// is {"items": [{"content": "...", "status": "pending|in_progress|done"}]}.
type Todo struct{}

var _ forge.Capability = Todo{}

// Name is "todo".
func (Todo) Name() string { return "todo" }

// Tools returns todo_read and todo_write bound to state.
func (Todo) Tools(state forge.CapabilityState) []forge.Tool {
	return []forge.Tool{todoRead{state}, todoWrite{state}}
}

// TodoItem is one task.
type TodoItem struct {
	Content string `json:"content"`
	Status  string `json:"status"`
}

// TodoList is the todo capability's state.
type TodoList struct {
	Items []TodoItem `json:"items"`
}

func loadTodo(state forge.CapabilityState) TodoList {
	var l TodoList
	if raw := state.Load(); len(raw) > 0 {
		_ = json.Unmarshal(raw, &l) // a state this code wrote; empty on error
	}
	if l.Items == nil {
		l.Items = []TodoItem{}
	}
	return l
}

func (l TodoList) String() string {
	if len(l.Items) == 0 {
		return "(the task list is empty)"
	}
	var b strings.Builder
	for i, it := range l.Items {
		fmt.Fprintf(&b, "%d. [%s] %s\n", i+1, it.Status, it.Content)
	}
	return strings.TrimRight(b.String(), "\n")
}

type todoRead struct{ state forge.CapabilityState }

func (todoRead) Def() forge.ToolDef {
	return forge.ToolDef{
		Name:        "todo_read",
		Description: "Returns your task list, kept across turns of this conversation.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`),
	}
}

func (t todoRead) Call(context.Context, json.RawMessage) (forge.ToolResult, error) {
	return forge.ToolResult{Output: loadTodo(t.state).String()}, nil
}

type todoWrite struct{ state forge.CapabilityState }

func (todoWrite) Def() forge.ToolDef {
	return forge.ToolDef{
		Name:        "todo_write",
		Description: "Replaces your task list (kept across turns). Give every task with its status: pending, in_progress or done.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object",` +
			`"properties":{"content":{"type":"string"},"status":{"type":"string","enum":["pending","in_progress","done"]}},` +
			`"required":["content","status"]}}},"required":["items"]}`),
	}
}

func (t todoWrite) Call(_ context.Context, args json.RawMessage) (forge.ToolResult, error) {
	var in struct {
		Items *[]TodoItem `json:"items"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Items == nil {
		return forge.ToolResult{}, fmt.Errorf(`todo_write needs {"items": [{"content": "...", "status": "pending|in_progress|done"}]}`)
	}
	for i, it := range *in.Items {
		switch it.Status {
		case "pending", "in_progress", "done":
		default:
			return forge.ToolResult{}, fmt.Errorf("todo_write: items[%d].status must be pending, in_progress or done, got %q", i, it.Status)
		}
		if strings.TrimSpace(it.Content) == "" {
			return forge.ToolResult{}, fmt.Errorf("todo_write: items[%d].content is empty", i)
		}
	}
	l := TodoList{Items: *in.Items}
	raw, err := json.Marshal(l)
	if err != nil {
		return forge.ToolResult{}, err
	}
	t.state.Store(raw)
	return forge.ToolResult{Output: "task list updated:\n" + l.String()}, nil
}

// Capabilities returns the built-in capabilities by name.
func Capabilities() map[string]forge.Capability {
	return map[string]forge.Capability{"todo": Todo{}}
}
