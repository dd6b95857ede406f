package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/engine"
)

// Turns is the engine's part of EngineRunner: *engine.Engine.
type Turns interface {
	StartTurn(ctx context.Context, tenant, sessionID string, req engine.TurnRequest) (*forge.Turn, error)
}

// Sessions is the store's part of EngineRunner.
type Sessions interface {
	GetAgent(ctx context.Context, tenant, name string) (*forge.Agent, error)
	CreateSession(ctx context.Context, s *forge.Session) error
	GetSession(ctx context.Context, tenant, id string) (*forge.Session, error)
}

// EngineRunner is the Runner of a server: sessions made as POST
// /v1/sessions makes them, turns started by the engine.
type EngineRunner struct {
	Store  Sessions
	Engine Turns
	Clock  forge.Clock
	IDs    forge.IDGen
}

var _ Runner = (*EngineRunner)(nil)

// NewSession creates a direct session of agent, its metadata naming the
// schedule; ErrNotFound when the agent is gone.
func (r *EngineRunner) NewSession(ctx context.Context, tenant, agent, scheduleID, runID string) (string, error) {
	if _, err := r.Store.GetAgent(ctx, tenant, agent); err != nil {
		return "", err
	}
	meta, err := json.Marshal(map[string]string{"schedule_id": scheduleID})
	if err != nil {
		return "", err
	}
	now := r.Clock.Now().UTC()
	ses := &forge.Session{
		// The run's session has the run's id: firing the run again
		// finds it rather than making another.
		ID:           forge.PrefixSession + strings.TrimPrefix(runID, forge.PrefixScheduleRun),
		Tenant:       tenant,
		Kind:         forge.KindDirect,
		Agent:        agent,
		Title:        "schedule " + scheduleID,
		MainThreadID: r.IDs.New(forge.PrefixThread),
		Metadata:     meta,
		CreatedAt:    now,
		UpdatedAt:    now,
	}
	if err := r.Store.CreateSession(ctx, ses); errors.Is(err, forge.ErrConflict) {
		if got, gerr := r.Store.GetSession(ctx, tenant, ses.ID); gerr == nil && got.Agent == agent {
			return got.ID, nil
		}
		return "", err
	} else if err != nil {
		return "", err
	}
	return ses.ID, nil
}

// StartTurn starts the run's turn in the background (the engine runs it;
// StartTurn returns once it is created), marked as the schedule's.
func (r *EngineRunner) StartTurn(ctx context.Context, tenant, sessionID, scheduleID, runID string, input []forge.Input) (*forge.Turn, error) {
	// A run on a session busy with another turn waits its turn (queued),
	// in order with the session's other queued turns.
	return r.Engine.StartTurn(ctx, tenant, sessionID, engine.TurnRequest{Input: input, ScheduleID: scheduleID,
		IfBusy: forge.IfBusyEnqueue, IdempotencyKey: runID})
}
