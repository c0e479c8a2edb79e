package pgbench_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// revokeTrials is how many losses one iteration of BenchmarkRevokeToDone
// measures; percentiles are taken over every trial of the run.
const revokeTrials = 50

// doneBound is how long a trial waits for Done before failing.
const doneBound = 10 * time.Second

// BenchmarkRevokeToDone measures how long after an operator ends a lock
// from psql the holder learns of it: from just before the operator's
// DELETE (of the lease row, cause=revoke, or of the claim row,
// cause=delete) to the closing of the guard's Done, through the
// Backend's listener. Target: p99 under 100ms. Metrics p50-ms, p99-ms and
// max-ms cover revokeTrials trials per iteration, all iterations
// together; ns/op is the time of a whole iteration and is not a figure of
// merit. The operator acts as soon as Acquire has returned.
func BenchmarkRevokeToDone(b *testing.B) {
	for _, cause := range []string{"revoke", "delete"} {
		b.Run("cause="+cause+"/impl=ashlock", func(b *testing.B) {
			db := newDatabase(b)
			c := newAshlock(b, db, "revoke-holder", new(counter))
			op := shared.Pool(b, db, "revoke-operator", nil)
			sql := fmt.Sprintf("DELETE FROM %s.leases WHERE id = $1", schema)
			if cause == "delete" {
				sql = fmt.Sprintf("DELETE FROM %s.claims WHERE key = $1 AND token = $2", schema)
			}
			ctx := runCtx(b)
			var lat []time.Duration
			for b.Loop() {
				for range revokeTrials {
					d, err := timeLoss(ctx, c.Lock("k"), func(ctx context.Context, claim backend.Claim) error {
						args := []any{int64(claim.Lease)}
						if cause == "delete" {
							args = []any{claim.Key, int64(claim.Token)}
						}
						tag, err := op.Exec(ctx, sql, args...)
						if err == nil && tag.RowsAffected() != 1 {
							err = fmt.Errorf("the operator's DELETE deleted %d rows", tag.RowsAffected())
						}
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					lat = append(lat, d)
				}
			}
			benchrun.ReportLatencies(b, "", lat)
		})
	}
}

// timeLoss acquires lock and times one loss: from just before act to the
// moment a goroutine blocked on the guard's Done wakes. After a revoke
// the client's pooled lease is gone; the next Acquire grants a fresh one.
func timeLoss(ctx context.Context, lock *ashlock.LockBuilder, act func(context.Context, backend.Claim) error) (time.Duration, error) {
	g, err := lock.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	// The guard is poisoned by the end; Unlock only unregisters it (and
	// reports ErrLeaseExpired, which is expected).
	defer func() { _ = g.Unlock(ctx) }()
	claim, err := g.Claim()
	if err != nil {
		return 0, err
	}
	closed := make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-g.Done():
			closed <- time.Now()
		case <-stop:
		}
	}()
	start := time.Now()
	if err := act(ctx, claim); err != nil {
		return 0, err
	}
	select {
	case at := <-closed:
		if !errors.Is(g.Err(), ashlock.ErrLeaseExpired) {
			return 0, fmt.Errorf("guard ended with %v, want ErrLeaseExpired", g.Err())
		}
		return at.Sub(start), nil
	case <-time.After(doneBound):
		return 0, errors.New("Done not closed within " + doneBound.String())
	}
}
