package engine

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/forge-runtime/forge"
)

// answerSpec is what a thread's final answer must be: JSON matching schema
// (structured output). Only the main thread has one: a subagent's answer
// is read by its parent's model, not by a client.
type answerSpec struct {
	schema   *forge.OutputSchema
	compiled forge.CompiledSchema
	// retries is how many repair steps an invalid answer gets.
	retries int
}

// repairData marks the user message of a repair step (its text part's
// data), for clients and for replays: the model saw it as a user message.
type repairData struct {
	Kind    string `json:"kind"` // "output_repair"
	Attempt int    `json:"attempt"`
}

// CheckOutputSchema validates an output schema given by a client (an
// agent's, a turn request's): its shape, then that it compiles. field
// names it in the error, which wraps forge.ErrInvalid.
func (e *Engine) CheckOutputSchema(s *forge.OutputSchema, field string) error {
	_, err := e.compileOutputSchema(s, field)
	return err
}

func (e *Engine) compileOutputSchema(s *forge.OutputSchema, field string) (forge.CompiledSchema, error) {
	if err := s.Check(field); err != nil {
		return nil, err
	}
	if e.cfg.Schemas == nil {
		return nil, forge.Errorf(forge.ErrInvalid, "%s: structured output is not available on this server", field)
	}
	c, err := e.cfg.Schemas.Compile(s.Schema)
	if err != nil {
		return nil, forge.Errorf(forge.ErrInvalid, "%s.schema is not a valid JSON Schema: %v", field, err)
	}
	return c, nil
}

// answerSpecFor is the turn's structured output: the request's schema,
// else the agent's; nil when neither has one.
func (e *Engine) answerSpecFor(agent *forge.Agent, req TurnRequest) (*answerSpec, error) {
	s, field := req.OutputSchema, "output_schema"
	if s == nil {
		s, field = agent.OutputSchema, "the agent's output_schema"
	}
	if s == nil || req.Compact {
		return nil, nil
	}
	c, err := e.compileOutputSchema(s, field)
	if err != nil {
		return nil, err
	}
	return &answerSpec{schema: s, compiled: c, retries: agent.Retries()}, nil
}

// outputSchema is what the thread's model calls ask for.
func (th *thread) outputSchema() *forge.OutputSchema {
	if th.answer == nil {
		return nil
	}
	return th.answer.schema
}

// checkAnswer checks the final answer msg against the thread's answer
// spec. done is set when the turn ends (with out); otherwise a repair
// step was recorded and the loop makes another model call.
func (th *thread) checkAnswer(msg *forge.Message) (out outcome, done bool) {
	text := textOf(msg)
	output := &forge.TurnOutput{MessageID: msg.ID, Text: text}
	if th.answer == nil {
		return outcome{status: forge.TurnDone, output: output}, true
	}
	doc := answerJSON(text)
	err := th.answer.compiled.Validate(doc)
	if err == nil {
		var compact bytes.Buffer
		if json.Compact(&compact, doc) == nil {
			doc = compact.Bytes()
		}
		output.JSON = doc
		return outcome{status: forge.TurnDone, output: output}, true
	}
	if th.repairs >= th.answer.retries || th.iterations >= th.agent.IterationLimit {
		return outcome{status: forge.TurnErrored, err: &forge.TurnError{Code: forge.CodeOutputInvalid,
			Message: fmt.Sprintf("the answer does not match the output schema %q after %d repair step(s): %v", th.answer.schema.Name, th.repairs, err)}}, true
	}
	th.repairs++
	note := th.newMessage(forge.RoleUser)
	p := th.newPart(note, forge.PartText)
	p.State = forge.StateCompleted
	p.Text = fmt.Sprintf("Your answer does not match the output schema %q:\n%v\nAnswer again with only the JSON value, matching the schema.", th.answer.schema.Name, err)
	p.Data = mustJSON(repairData{Kind: "output_repair", Attempt: th.repairs})
	note.Parts = append(note.Parts, p)
	th.putPart(p)
	th.history = append(th.history, note)
	th.messageEvent(forge.EventMessageCreated, note)
	return outcome{}, false
}

// answerJSON is the JSON of an answer's text: the text, or the body of the
// one fenced code block a model wrapped it in.
func answerJSON(text string) []byte {
	b := bytes.TrimSpace([]byte(text))
	if !bytes.HasPrefix(b, []byte("```")) || !bytes.HasSuffix(b, []byte("```")) || len(b) < 6 {
		return b
	}
	inner := b[3 : len(b)-3]
	nl := bytes.IndexByte(inner, '\n')
	if nl < 0 {
		return b
	}
	if lang := bytes.TrimSpace(inner[:nl]); len(lang) > 0 && !bytes.EqualFold(lang, []byte("json")) {
		return b
	}
	return bytes.TrimSpace(inner[nl+1:])
}
