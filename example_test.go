package ashlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/fencing"
)

// The usual shape: Do holds the lock while fn runs and passes the fencing
// token to attach to writes.
func ExampleLockBuilder_Do() {
	ctx := context.Background()
	client, err := ashlock.Connect(ctx, ashlock.LockConfig{}) // in-process backend
	if err != nil {
		panic(err)
	}
	defer client.Close(ctx)

	err = client.Lock("orders/42").WithTTL(10*time.Second).Do(ctx, func(ctx context.Context, token uint64) error {
		fmt.Println("holding orders/42 with token", token)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// holding orders/42 with token 1
	// err: <nil>
}

// Acquire returns a Guard to release explicitly; its token grows with
// every acquisition of the key.
func ExampleLockBuilder_Acquire() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	for range 2 {
		g, err := client.Lock("reports/daily").Acquire(ctx)
		if err != nil {
			panic(err)
		}
		token, _ := g.FencingToken()
		fmt.Println(g.Key(), token)
		if err := g.Unlock(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// reports/daily 1
	// reports/daily 2
}

// TryAcquire does not wait: a held key gives ErrLocked.
func ExampleLockBuilder_TryAcquire() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	held, _ := client.Lock("cron/cleanup").Acquire(ctx)
	_, err := client.Lock("cron/cleanup").TryAcquire(ctx)
	fmt.Println(errors.Is(err, ashlock.ErrLocked))
	_ = held.Unlock(ctx)

	g, err := client.Lock("cron/cleanup").TryAcquire(ctx)
	fmt.Println(err)
	_ = g.Unlock(ctx)
	// Output:
	// true
	// <nil>
}

// After Unlock a guard refuses to hand out its token.
func ExampleGuard_FencingToken() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	g, _ := client.Lock("k").Acquire(ctx)
	token, err := g.FencingToken()
	fmt.Println(token, err)
	_ = g.Unlock(ctx)
	_, err = g.FencingToken()
	fmt.Println(errors.Is(err, ashlock.ErrUnlocked))
	// Output:
	// 1 <nil>
	// true
}

// Inspect shows the holder and the queue.
func ExampleLockClient_Inspect() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	info, _ := client.Inspect(ctx, "k")
	fmt.Println("held:", info.Held)
	g, _ := client.Lock("k").WithOwner("worker-7").Acquire(ctx)
	info, _ = client.Inspect(ctx, "k")
	fmt.Println("held:", info.Held, "by", info.Owner, "token", info.Token, "waiters", len(info.Waiters))
	_ = g.Unlock(ctx)
	// Output:
	// held: false
	// held: true by worker-7 token 1 waiters 0
}

// The resource side: a Fence admits a token only if it is at least the
// highest it has seen, so a holder that lost the lock cannot overwrite its
// successor's work.
func ExampleValidateWrite() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	var fence fencing.Fence
	old, _ := client.Lock("account/7").Acquire(ctx)
	oldToken, _ := old.FencingToken()
	_ = old.Unlock(ctx) // imagine: paused, lease lost, still believes it holds

	cur, _ := client.Lock("account/7").Acquire(ctx)
	curToken, _ := cur.FencingToken()
	fmt.Println("new holder:", fence.Admit("account/7", curToken))
	fmt.Println("stale holder refused:", errors.Is(fence.Admit("account/7", oldToken), fencing.ErrStaleToken))
	fmt.Println(ashlock.ValidateWrite(curToken, fence.Highest("account/7")))
	_ = cur.Unlock(ctx)
	// Output:
	// new holder: <nil>
	// stale holder refused: true
	// true
}
