package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/forge-runtime/forge"
)

// A turn that pauses for approvals asks the client through MCP
// elicitation, when the client declared it can be asked: "approve this
// call?" per approval, then the turn goes on with the answers, within the
// same tool call, to its final text. A 2026-07-28 client (stateless) is
// asked with an input-required result (multi round-trip requests,
// SEP-2322) and retries the call with its answers and our request state;
// a client in an MCP session is asked with elicitation/create while the
// call waits. Client tools (and auth) cannot be answered by a form: such a
// turn answers what is pending, as for a client that cannot be asked.

// maxElicitRounds bounds the approvals asked within one call (each round
// a turn that paused again).
const maxElicitRounds = 8

// maxShownArguments bounds the arguments quoted in a question.
const maxShownArguments = 2000

// approvalSchema is the form of an approval: approve, and why.
var approvalSchema = &jsonschema.Schema{
	Type: "object",
	Properties: map[string]*jsonschema.Schema{
		"approve": {Type: "boolean", Title: "Approve", Description: "true runs the call; false refuses it"},
		"reason":  {Type: "string", Title: "Reason", Description: "why (the agent sees it when refused)"},
	},
	Required: []string{"approve"},
}

// requestState is what a stateless client echoes back: the paused turn.
// Authenticity needs no signature: the retry carries the caller's key,
// and the session is checked to be its tenant's and the agent's.
type requestState struct {
	SessionID string `json:"s"`
	TurnID    string `json:"t"`
}

// canElicit reports how the client can be asked: by an input-required
// result (mrtr) or in its session (direct); neither: it cannot.
func canElicit(req *mcp.CallToolRequest) (mrtr, direct bool) {
	if req == nil || req.Session == nil {
		return false, false
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil || (caps.Elicitation.Form == nil && caps.Elicitation.URL != nil) {
		return false, false
	}
	if req.ProtocolVersion() >= "2026-07-28" {
		return true, false
	}
	// An older client is reachable only in a session (a stateless request
	// cannot carry a question back).
	return false, req.Session.ID() != ""
}

// onlyApprovals reports whether a turn waits for approvals alone.
func onlyApprovals(t *forge.Turn) bool {
	if t.Status != forge.TurnDone || len(t.RequiredActions) == 0 {
		return false
	}
	for _, a := range t.RequiredActions {
		if a.Type != forge.ActionApproval {
			return false
		}
	}
	return true
}

// question is the elicitation asking to approve a.
func question(agent string, a forge.RequiredAction) *mcp.ElicitParams {
	args := string(a.Arguments)
	if len(args) > maxShownArguments {
		cut := maxShownArguments
		for cut > 0 && !utf8.RuneStart(args[cut]) {
			cut--
		}
		args = args[:cut] + "..."
	}
	return &mcp.ElicitParams{
		Mode:            "form",
		Message:         fmt.Sprintf("The Forge agent %s asks to run the tool %s with arguments %s. Approve this call (%s)?", agent, a.Tool, args, a.CallID),
		RequestedSchema: approvalSchema,
	}
}

// decision is the approval input an elicitation's answer makes: approved
// only when accepted with approve true; declined, cancelled or anything
// else refuses.
func decision(callID string, res *mcp.ElicitResult) forge.Input {
	approved := false
	reason := ""
	switch {
	case res == nil:
		reason = "not answered"
	case res.Action == "accept":
		approved, _ = res.Content["approve"].(bool)
		reason, _ = res.Content["reason"].(string)
	default:
		reason = "the MCP client answered " + res.Action
	}
	in := forge.Input{Type: forge.InputApproval, CallID: callID, Approved: &approved}
	if !approved {
		in.Reason = strings.TrimSpace(reason)
	}
	return in
}

// settle answers an ended turn; while it waits for approvals and the
// client can be asked, it asks, and runs the turn on with the answers.
func (h *handler) settle(ctx context.Context, req *mcp.CallToolRequest, tenant, agent string, ses *forge.Session, final *forge.Turn) (*mcp.CallToolResult, Answer, error) {
	mrtr, direct := canElicit(req)
	for round := 0; round < maxElicitRounds && onlyApprovals(final); round++ {
		switch {
		case mrtr:
			asks := mcp.InputRequestMap{}
			for _, a := range final.RequiredActions {
				asks[a.CallID] = question(agent, a)
			}
			state, _ := json.Marshal(requestState{SessionID: ses.ID, TurnID: final.ID})
			return &mcp.CallToolResult{InputRequests: asks, RequestState: base64.RawURLEncoding.EncodeToString(state)}, Answer{}, nil
		case direct:
			var input []forge.Input
			for _, a := range final.RequiredActions {
				res, err := req.Session.Elicit(ctx, question(agent, a))
				if err != nil {
					if ctx.Err() != nil {
						return nil, Answer{}, ctx.Err()
					}
					// A client that cannot answer leaves the turn as it is.
					h.env.Log.Warn("mcp: elicitation failed", "tenant", tenant, "session_id", ses.ID, "err", err)
					return answer(ses, final)
				}
				input = append(input, decision(a.CallID, res))
			}
			next, err := h.run(ctx, req, tenant, ses, input)
			if err != nil {
				return nil, Answer{}, err
			}
			final = next
		default:
			return answer(ses, final)
		}
	}
	return answer(ses, final)
}

// resume continues a call a stateless client retried with its answers:
// the paused turn of our request state, approved or refused call by call.
func (h *handler) resume(ctx context.Context, req *mcp.CallToolRequest, tenant, agent, rawState string, answers mcp.InputResponseMap) (*mcp.CallToolResult, Answer, error) {
	var st requestState
	raw, err := base64.RawURLEncoding.DecodeString(rawState)
	if err != nil || len(raw) > 1024 || json.Unmarshal(raw, &st) != nil || st.SessionID == "" || st.TurnID == "" {
		return nil, Answer{}, errors.New("invalid_request: requestState is not one this server made")
	}
	ses, err := h.session(ctx, tenant, agent, st.SessionID)
	if err != nil {
		return nil, Answer{}, err
	}
	paused, err := h.env.Store.GetTurn(ctx, tenant, ses.ID, st.TurnID)
	if err != nil {
		return nil, Answer{}, h.public(err)
	}
	if !onlyApprovals(paused) {
		return nil, Answer{}, fmt.Errorf("conflict: turn %s does not wait for approvals", paused.ID)
	}
	var input []forge.Input
	for _, a := range paused.RequiredActions {
		res, _ := answers[a.CallID].(*mcp.ElicitResult)
		if res == nil {
			return nil, Answer{}, fmt.Errorf("invalid_request: inputResponses has no answer for %s", a.CallID)
		}
		input = append(input, decision(a.CallID, res))
	}
	final, err := h.run(ctx, req, tenant, ses, input)
	if err != nil {
		return nil, Answer{}, err
	}
	return h.settle(ctx, req, tenant, agent, ses, final)
}
