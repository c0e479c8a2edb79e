// Command etcd-dev runs a one-member etcd in this process for trying out
// ashlock's etcd backend and examples without installing etcd:
//
//	go run ./cmd/etcd-dev                     # from the tests/ directory
//	go run ./cmd/etcd-dev -addr 127.0.0.1:2379 -data-dir /tmp/etcd-dev
//
// It prints the member's client endpoint and a ClusterSeed for it, then
// serves until SIGINT or SIGTERM. Without -data-dir the data lives in a
// temporary directory removed at exit. Not for production: it skips fsync.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ash-lock/ashlock/tests/etcdtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:2379", "client address to listen on (host:port; port 0 picks a free one)")
	dir := flag.String("data-dir", "", "data directory to use and keep (default: a temporary one, removed at exit)")
	flag.Parse()
	if err := run(*addr, *dir); err != nil {
		log.Fatalf("etcd-dev: %v", err)
	}
}

func run(addr, dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := etcdtest.Options{Dir: dir, ClientAddrs: []string{addr}}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := etcdtest.Launch(startCtx, opts)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	ep := c.Endpoints()[0]
	fmt.Printf("etcd listening on %s\n", ep)
	fmt.Printf("ClusterSeed: etcd://%s/ashlock/\n", ep)
	fmt.Println("press Ctrl-C to stop")
	<-ctx.Done()
	fmt.Println("stopping")
	return nil
}
