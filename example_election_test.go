package ashlock_test

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/fencing"
)

// Campaign blocks until the caller leads; the guard's token is the term,
// which fences the leader's writes, and Unlock resigns.
func ExampleElection_Campaign() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)
	election := client.Election("compactor").WithOwner("node-1")

	g, _ := election.Campaign(ctx, []byte("10.0.0.1:7000"))
	term, _ := g.FencingToken()
	var fence fencing.Fence
	fmt.Println("write with term", term, "admitted:", fence.Admit("segments", term) == nil)

	leader, _ := election.Leader(ctx)
	fmt.Printf("%s leads at %s\n", leader.Owner, leader.Value)

	g.Unlock(ctx) // resign
	_, err := election.Leader(ctx)
	fmt.Println(errors.Is(err, ashlock.ErrNoLeader))
	// Output:
	// write with term 1 admitted: true
	// node-1 leads at 10.0.0.1:7000
	// true
}

// Run is the whole leader loop: lead is called once per term, with a
// context that ends the moment the term is lost, and Run campaigns again
// after each term until its own context ends.
func ExampleElection_Run() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	runCtx, stop := context.WithCancel(ctx)
	terms := 0
	err := client.Election("scheduler").Run(runCtx, []byte("node-1"), func(ctx context.Context, term uint64) error {
		terms++
		fmt.Println("leading term", term)
		if terms == 2 {
			stop() // shutting down
		}
		return nil // resign; Run campaigns again
	})
	fmt.Println("Run returned:", errors.Is(err, context.Canceled))
	// Output:
	// leading term 1
	// leading term 2
	// Run returned: true
}

// Observe yields the current leader, then every change: a new value, a new
// term, and "no leader" (Token 0).
func ExampleElection_Observe() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)
	election := client.Election("api")

	next, stop := iter.Pull2(election.Observe(ctx))
	defer stop()
	show := func() {
		l, _, _ := next()
		if l.Token == 0 {
			fmt.Println(l.Name, "has no leader")
			return
		}
		fmt.Printf("%s: term %d at %s\n", l.Name, l.Token, l.Value)
	}

	show()
	g, _ := election.Campaign(ctx, []byte("10.0.0.1:8080"))
	show()
	g.SetValue(ctx, []byte("10.0.0.1:9090"))
	show()
	g.Unlock(ctx)
	show()
	// Output:
	// api has no leader
	// api: term 1 at 10.0.0.1:8080
	// api: term 1 at 10.0.0.1:9090
	// api has no leader
}
