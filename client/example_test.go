package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/forge-runtime/forge"
	"github.com/forge-runtime/forge/client"
)

func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", client.WithAPIKey("KEY"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.CreateAgent(ctx, &forge.Agent{Name: "support", Model: "openai/gpt-4.1-mini"}); err != nil && !client.IsConflict(err) {
		log.Fatal(err)
	}
	ses, err := c.CreateSession(ctx, client.CreateSessionRequest{Agent: "support"})
	if err != nil {
		log.Fatal(err)
	}
	// Stream a turn: text deltas as they come; the stream survives dropped
	// connections without gaps or duplicates.
	for ev, err := range c.StreamTurn(ctx, ses.ID, client.TurnRequest{Input: client.Message("Where is order 42?")}) {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Type {
		case forge.EventModelDelta:
			var d forge.DeltaData
			_ = json.Unmarshal(ev.Data, &d)
			fmt.Print(d.Delta)
		case forge.EventTurnDone:
			var t forge.Turn
			_ = json.Unmarshal(ev.Data, &t)
			for _, a := range t.RequiredActions {
				fmt.Println("\nwaiting for", a.Type, a.Tool)
			}
		}
	}
}
