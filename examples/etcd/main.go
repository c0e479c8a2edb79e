// Command etcd runs a fenced counter kept in etcd: several clients, each
// with its own LockClient, take turns incrementing one key, and every write
// is a transaction that commits only while the writer's claim still holds
// the lock (the backend's IsOwner comparison).
//
// It needs an etcd. Without one installed, start the embedded test server
// in another terminal and pass the endpoint it prints:
//
//	cd tests && go run ./cmd/etcd-dev
//	go run ./examples/etcd -endpoints 127.0.0.1:PORT
//
// (Debian's etcd-server package works too: -endpoints 127.0.0.1:2379.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/etcd"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	workers := flag.Int("workers", 4, "clients incrementing the counter")
	rounds := flag.Int("rounds", 25, "increments per client")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	const counter = "example/counter"
	if _, err := cli.Put(ctx, counter, "0"); err != nil {
		log.Fatalf("etcd at %s: %v", *endpoints, err)
	}

	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			if err := work(ctx, cli, counter, w, *rounds); err != nil {
				log.Printf("worker %d: %v", w, err)
			}
		})
	}
	wg.Wait()

	resp, err := cli.Get(ctx, counter)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("counter = %s (want %d)\n", resp.Kvs[0].Value, *workers**rounds)
}

// work runs one client: its own backend and LockClient over the shared
// etcd client, as separate processes would have.
func work(ctx context.Context, cli *clientv3.Client, counter string, id, rounds int) error {
	be, err := etcd.New(cli, etcd.WithPrefix("example/locks/"))
	if err != nil {
		return err
	}
	defer be.Close()
	client, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{DefaultTTL: 5 * time.Second}, be)
	if err != nil {
		return err
	}
	defer client.Close(ctx)

	lock := client.Lock("counter").WithOwner(fmt.Sprint("worker-", id))
	for range rounds {
		g, err := lock.Acquire(ctx)
		if err != nil {
			return err
		}
		err = increment(ctx, cli, be, g, counter)
		if uerr := g.Unlock(ctx); err == nil {
			err = uerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// increment reads the counter and writes it back plus one, in a Txn that
// commits only while g's claim still holds the lock: a holder that lost
// its lease between the read and the write changes nothing.
func increment(ctx context.Context, cli *clientv3.Client, be *etcd.Backend, g *ashlock.Guard, counter string) error {
	claim, err := g.Claim()
	if err != nil {
		return err
	}
	resp, err := cli.Get(ctx, counter)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(string(resp.Kvs[0].Value))
	if err != nil {
		return err
	}
	txn, err := cli.Txn(ctx).
		If(be.IsOwner(claim)).
		Then(clientv3.OpPut(counter, strconv.Itoa(n+1))).
		Commit()
	if err != nil {
		return err
	}
	if !txn.Succeeded {
		return errors.New("lock lost before the write: nothing written")
	}
	return nil
}
