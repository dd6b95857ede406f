package server_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/forge-runtime/forge/server"
)

// Embedding Forge in a Go program (the README's snippet; compiled, not
// run).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv, err := server.New(ctx, server.Config{DB: "./forge.db"}) // or postgres://..., Redis, keys, limits
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx, "127.0.0.1:8080"); err != nil { // or srv.Handler() in your own mux
		log.Fatal(err)
	}
	<-ctx.Done()
	_ = srv.Stop(context.Background()) // drains: running turns get Config.ShutdownGrace
}
