package ashlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/fencing"
)

// Readers share a key; a writer waits for them, and readers that come
// after a waiting writer wait for it in turn.
func ExampleLockBuilder_Shared() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	r1, _ := client.Lock("catalog").Shared().Acquire(ctx)
	r2, _ := client.Lock("catalog").Shared().Acquire(ctx)
	_, err := client.Lock("catalog").TryAcquire(ctx) // a writer
	fmt.Println("writer refused while two readers hold:", errors.Is(err, ashlock.ErrLocked))

	var fence fencing.Fence
	t1, _ := r1.FencingToken()
	t2, _ := r2.FencingToken()
	// Readers are admitted with AdmitShared and never refuse each other.
	fmt.Println(fence.AdmitShared("catalog", t2), fence.AdmitShared("catalog", t1))

	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w, _ := client.Lock("catalog").Acquire(ctx)
	tw, _ := w.FencingToken()
	fmt.Println("writer admitted:", fence.Admit("catalog", tw))
	w.Unlock(ctx)
	// Output:
	// writer refused while two readers hold: true
	// <nil> <nil>
	// writer admitted: <nil>
}

// A counted lock admits n holders at once, each with its own permit, so a
// pool of n resources can be fenced per permit ("key#permit").
func ExampleLockBuilder_WithPermits() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	pool := client.Lock("gpu").WithPermits(2)
	a, _ := pool.Acquire(ctx)
	b, _ := pool.Acquire(ctx)
	fmt.Println("permits:", a.Permit(), b.Permit())
	_, err := pool.TryAcquire(ctx)
	fmt.Println("third refused:", errors.Is(err, ashlock.ErrLocked))

	a.Unlock(ctx)
	c, _ := pool.Acquire(ctx) // takes the permit a gave back
	token, _ := c.FencingToken()
	fmt.Printf("resource gpu#%d, token %d\n", c.Permit(), token)

	_, err = client.Lock("gpu").TryAcquire(ctx) // another permit count
	fmt.Println("plain lock on a counted key:", errors.Is(err, ashlock.ErrPermitMismatch))
	b.Unlock(ctx)
	c.Unlock(ctx)
	// Output:
	// permits: 0 1
	// third refused: true
	// resource gpu#0, token 3
	// plain lock on a counted key: true
}

// LockAll takes every key or none, with one token valid at each key's
// fence, and never deadlocks whatever order callers list keys in.
func ExampleLockClient_LockAll() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	err := client.LockAll("accounts/bob", "accounts/alice").Do(ctx, func(ctx context.Context, token uint64) error {
		var fence fencing.Fence
		fmt.Println(fence.Admit("accounts/alice", token), fence.Admit("accounts/bob", token))
		return nil
	})
	fmt.Println("err:", err)

	g, _ := client.LockAll("accounts/bob", "accounts/alice").Acquire(ctx)
	fmt.Println(g.Keys())
	g.Unlock(ctx)
	// Output:
	// <nil> <nil>
	// err: <nil>
	// [accounts/alice accounts/bob]
}

// A holder publishes a value with its claim; Inspect shows every holder.
func ExampleGuard_SetValue() {
	ctx := context.Background()
	client, _ := ashlock.Connect(ctx, ashlock.LockConfig{})
	defer client.Close(ctx)

	g, _ := client.Lock("migrations").WithOwner("deployer-1").WithValue([]byte("step 1/3")).Acquire(ctx)
	defer g.Unlock(ctx)
	if err := g.SetValue(ctx, []byte("step 2/3")); err != nil {
		panic(err)
	}
	info, _ := client.Inspect(ctx, "migrations")
	for _, h := range info.Holders {
		fmt.Printf("%s holds with token %d: %s\n", h.Owner, h.Token, h.Value)
	}
	// Output:
	// deployer-1 holds with token 1: step 2/3
}
