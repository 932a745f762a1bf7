// Command wandb runs the local W&B test server by itself:
//
//	go run ./mocks/wandb -addr 127.0.0.1:8080 -api-key "$WANDB_API_KEY"
//
// then point a client at it with WANDB_BASE_URL=http://127.0.0.1:8080 and
// inspect what it holds at /_mock/state and /_mock/requests.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/bridge-dev/bridge/mocks/wandb/wandbserver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	key := flag.String("api-key", os.Getenv("WANDB_API_KEY"), "the only API key accepted (empty: any)")
	entity := flag.String("entity", "mock-entity", "the viewer's default entity")
	verbose := flag.Bool("v", false, "log every request")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	srv := wandbserver.New(wandbserver.Options{APIKey: *key, Entity: *entity, Logger: log})
	if err := srv.Start(*addr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(srv.URL())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
