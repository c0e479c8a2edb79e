package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

func Example() {
	ctx := context.Background()
	b := memory.New()
	defer b.Close()

	lease, _ := b.Grant(ctx, 30*time.Second)
	claim, err := b.Acquire(ctx, backend.AcquireRequest{
		Key: "orders/42", ID: "claim-1", Lease: lease.ID, Owner: "worker-a", Wait: true, Fair: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	info, _ := b.Inspect(ctx, "orders/42")
	fmt.Println("held by", info.Owner, "with token", claim.Token)

	_ = b.Release(ctx, claim)
	info, _ = b.Inspect(ctx, "orders/42")
	fmt.Println("held after release:", info.Held)
	// Output:
	// held by worker-a with token 1
	// held after release: false
}

// holdOn acquires key on a fresh lease of ttl and returns the lease and a
// channel that receives the OnLost cause.
func holdOn(b *memory.Backend, key string, ttl time.Duration) (backend.Lease, <-chan error) {
	ctx := context.Background()
	lease, _ := b.Grant(ctx, ttl)
	lost := make(chan error, 1)
	_, err := b.Acquire(ctx, backend.AcquireRequest{
		Key: key, ID: "claim-" + key, Lease: lease.ID, Owner: "example", Wait: true, Fair: true,
		OnLost: backend.LossFunc(func(cause error) { lost <- cause }),
	})
	if err != nil {
		panic(err)
	}
	return lease, lost
}

// A ManualClock makes lease expiry happen exactly when the test says.
func ExampleWithClock() {
	clock := memory.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := memory.New(memory.WithClock(clock))
	defer b.Close()

	_, lost := holdOn(b, "report", 10*time.Second)
	clock.Advance(9 * time.Second)
	info, _ := b.Inspect(context.Background(), "report")
	fmt.Println("held after 9s:", info.Held)

	clock.Advance(time.Second) // the lease was never renewed
	fmt.Println("lost:", errors.Is(<-lost, backend.ErrLeaseExpired))
	// Output:
	// held after 9s: true
	// lost: true
}

func ExampleManualClock_Advance() {
	clock := memory.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	clock.AfterFunc(2*time.Second, func() { fmt.Println("fired at", clock.Now().Format(time.TimeOnly)) })
	clock.Advance(time.Second)
	fmt.Println("after 1s")
	clock.Advance(time.Second)
	// Output:
	// after 1s
	// fired at 00:00:02
}

func ExampleBackend_FailRenewals() {
	ctx := context.Background()
	b := memory.New()
	defer b.Close()
	lease, _ := b.Grant(ctx, time.Minute)

	b.FailRenewals(fmt.Errorf("link down: %w", backend.ErrUnavailable))
	_, err := b.KeepAlive(ctx, lease.ID)
	fmt.Println("renewal unavailable:", errors.Is(err, backend.ErrUnavailable))

	b.FailRenewals(nil)
	ttl, err := b.KeepAlive(ctx, lease.ID)
	fmt.Println("renewed for", ttl, err)
	// Output:
	// renewal unavailable: true
	// renewed for 1m0s <nil>
}

func ExampleBackend_DelayRenewals() {
	b := memory.New()
	defer b.Close()
	lease, _ := b.Grant(context.Background(), time.Minute)

	b.DelayRenewals(time.Hour) // renewals hang
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := b.KeepAlive(ctx, lease.ID)
	fmt.Println("gave up:", errors.Is(err, context.DeadlineExceeded), errors.Is(err, backend.ErrUnavailable))
	// Output:
	// gave up: true true
}

func ExampleBackend_ExpireLease() {
	b := memory.New()
	defer b.Close()
	lease, lost := holdOn(b, "batch", time.Minute)

	fmt.Println("expired:", b.ExpireLease(lease.ID))
	fmt.Println(<-lost)
	// Output:
	// expired: true
	// memory: claim on "batch": lease 1 expired: ashlock: lease expired
}

// ExpireKey is for tests that know the lock's key but not the lease behind
// it, as when the lease is pooled by an ashlock client.
func ExampleBackend_ExpireKey() {
	b := memory.New()
	defer b.Close()
	_, lost := holdOn(b, "nightly", time.Minute)

	fmt.Println("expired:", b.ExpireKey("nightly"))
	fmt.Println("lease expired:", errors.Is(<-lost, backend.ErrLeaseExpired))
	// Output:
	// expired: true
	// lease expired: true
}

func ExampleBackend_DeleteClaim() {
	ctx := context.Background()
	b := memory.New()
	defer b.Close()
	lease, lost := holdOn(b, "invoice", time.Minute)

	fmt.Println("deleted:", b.DeleteClaim("invoice"))
	fmt.Println(<-lost)
	_, err := b.KeepAlive(ctx, lease.ID)
	fmt.Println("lease still live:", err == nil)
	// Output:
	// deleted: true
	// memory: claim on "invoice" deleted from the store: ashlock: lease expired
	// lease still live: true
}
