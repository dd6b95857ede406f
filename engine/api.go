package engine

// The exported surface of the engine, used by httpapi. Bodies live in the
// files named after each concern (turn.go, cancel.go, events.go ...).
//
//	func New(cfg Config) *Engine
//	func (e *Engine) Recover(ctx context.Context) error
//	func (e *Engine) StartTurn(ctx context.Context, tenant, sessionID string, req TurnRequest) (*forge.Turn, error)
//	func (e *Engine) WaitTurn(ctx context.Context, tenant, sessionID, turnID string) (*forge.Turn, error)
//	func (e *Engine) Cancel(ctx context.Context, tenant, sessionID, reason string) (*forge.Turn, error)
//	func (e *Engine) Events(ctx context.Context, tenant, sessionID string, q EventsQuery) iter.Seq2[forge.Event, error]
//	func (e *Engine) DeleteSession(ctx context.Context, tenant, sessionID string) error
//	func (e *Engine) ModelView(ctx context.Context, tenant, sessionID string, opts forge.ListOptions) ([]*forge.Message, string, error)
//	func (e *Engine) IsBuiltin(name string) bool
//	func (e *Engine) Close(ctx context.Context) error
