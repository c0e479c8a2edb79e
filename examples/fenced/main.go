// Command fenced shows why the resource, not the lock, has the last word.
//
// Worker A takes the lock, reads a balance, and is then "paused" (here:
// its lease is expired by hand, as a long GC pause or a frozen VM would let
// it expire). Worker B takes the lock, does its own read-modify-write, and
// releases. A resumes, still holding the value it read before the pause,
// and tries to write it back. The store refuses A's write because A's
// fencing token is older than B's: without the token check, B's deposit
// would silently vanish.
//
//	go run ./examples/fenced
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/memory"
	"github.com/ash-lock/ashlock/fencing"
)

// store is the protected resource. Every read and write carries the
// caller's fencing token, and the check and the access happen under one
// mutex: a check separate from the write would leave a gap.
type store struct {
	mu      sync.Mutex
	fence   fencing.Fence
	balance int
}

func (s *store) read(token uint64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence.Admit("balance", token); err != nil {
		return 0, err
	}
	return s.balance, nil
}

func (s *store) write(token uint64, v int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence.Admit("balance", token); err != nil {
		return err
	}
	s.balance = v
	return nil
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	be := memory.New() // kept so that we can expire A's lease by hand
	defer be.Close()
	quiet := slog.New(slog.DiscardHandler) // A's poisoning warning is expected here
	client, err := ashlock.ConnectWith(ctx, ashlock.LockConfig{Logger: quiet}, be)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	s := &store{balance: 100}

	// A: lock, read.
	a, err := client.Lock("account").WithOwner("A").Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tokenA, _ := a.FencingToken()
	seenByA, _ := s.read(tokenA)
	fmt.Printf("A holds token %d and reads %d\n", tokenA, seenByA)

	// A is paused; meanwhile its lease runs out.
	be.ExpireKey("account")
	<-a.Done()
	fmt.Println("A's guard is poisoned:", a.Err() != nil)

	// B: lock, read-modify-write, release.
	err = client.Lock("account").WithOwner("B").Do(ctx, func(ctx context.Context, tokenB uint64) error {
		v, err := s.read(tokenB)
		if err != nil {
			return err
		}
		fmt.Printf("B holds token %d and deposits 50: %d -> %d\n", tokenB, v, v+50)
		return s.write(tokenB, v+50)
	})
	if err != nil {
		log.Fatal(err)
	}

	// A resumes, unaware, and writes back what it computed before the pause.
	err = s.write(tokenA, seenByA+10)
	fmt.Println("A's late write refused:", errors.Is(err, fencing.ErrStaleToken))
	fmt.Println("balance:", s.balance)
}
