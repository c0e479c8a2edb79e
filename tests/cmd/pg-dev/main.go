// Command pg-dev runs a throwaway PostgreSQL server for trying out
// ashlock's PostgreSQL backend and examples without setting one up:
//
//	go run ./cmd/pg-dev     # from the tests/ directory
//
// It uses the system's PostgreSQL binaries (see package pgtest: run as
// root, the server runs as an unprivileged user), prints a URL and a
// ClusterSeed for it, then serves until SIGINT or SIGTERM and removes its
// data. Not for production: it skips fsync and trusts every local login.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/ash-lock/ashlock/tests/pgtest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), pgtest.StartTimeout)
	s, err := pgtest.Launch(ctx)
	cancel()
	if err != nil {
		log.Fatalf("pg-dev: %v", err)
	}
	defer s.Close()
	fmt.Printf("url:  %s\nseed: %s&ashlock_schema=ashlock\n", s.URL("postgres"), s.URL("postgres"))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
