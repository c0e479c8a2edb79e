// Command quickstart takes a lock on the in-process backend, writes under
// it with the fencing token, and shows what a stale holder gets.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/fencing"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// An empty ClusterSeed selects the in-process backend: nothing to run.
	client, err := ashlock.Connect(ctx, ashlock.LockConfig{DefaultTTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	// The resource: it remembers the highest token it accepted.
	var fence fencing.Fence
	balance := 0
	deposit := func(token uint64, amount int) error {
		if err := fence.Admit("account/7", token); err != nil {
			return err
		}
		balance += amount
		return nil
	}

	// Do holds the lock while the function runs and releases it after.
	err = client.Lock("account/7").Do(ctx, func(ctx context.Context, token uint64) error {
		fmt.Printf("holding account/7 with fencing token %d\n", token)
		return deposit(token, 100)
	})
	if err != nil {
		log.Fatal(err)
	}

	// Acquire and Unlock by hand, keeping the guard.
	g, err := client.Lock("account/7").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	token, err := g.FencingToken()
	if err != nil {
		log.Fatal(err)
	}
	if err := deposit(token, 50); err != nil {
		log.Fatal(err)
	}
	if err := g.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("balance %d after two fenced deposits\n", balance)

	// A holder that was paused past its lease comes back with token 1,
	// but the resource has already seen 2: the write is refused.
	err = deposit(1, 1_000_000)
	fmt.Println("stale write refused:", errors.Is(err, fencing.ErrStaleToken), "-", err)

	// A guard that has been released will not hand out its token.
	_, err = g.FencingToken()
	fmt.Println("token after Unlock:", err)
}
