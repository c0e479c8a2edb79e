package bench_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// revokeTrials is how many losses one iteration of BenchmarkRevokeToDone
// measures; percentiles are taken over every trial of the run.
const revokeTrials = 50

// doneBound is how long a trial waits for Done before failing.
const doneBound = 10 * time.Second

// trial makes one fresh holder and says how an operator ends it.
type trial func(ctx context.Context) (lossTrial, error)

// lossTrial is one holder ready to be ended from outside.
type lossTrial struct {
	done   <-chan struct{}                 // the holder's Done
	act    func(ctx context.Context) error // the operator's request, timed
	finish func(ctx context.Context)       // cleans up after Done, untimed
}

// BenchmarkRevokeToDone measures how long after an operator ends a lock
// from outside (revoking its lease, or deleting its claim key) the holder
// learns of it: the time from just before the operator's request to the
// closing of Done. Target for ashlock: p99 < 100ms. The peer is etcd's
// concurrency.Session.Done (2s TTL, the shortest the member grants), which
// only notices at its next keep-alive. Metrics p50-ms, p99-ms and max-ms
// cover revokeTrials trials per iteration, all iterations together; ns/op
// is the time of a whole iteration and is not a figure of merit.
//
// The operator acts as soon as Acquire has returned. The claim of the
// ashlock rows is its key's first, under a fresh name, so it is watched
// from before it exists. The ashlock-reused-name rows take and give back
// the key first (untimed), so that the claim is made under a name that
// came back without a watch and gets its watch only after the claim watch
// delay (5ms to 10ms): the worst case, where the loss is learnt from the
// read that starts the watch. The ashlock-reused-name-after-20ms rows act
// 20ms into such a hold, once the watch runs.
func BenchmarkRevokeToDone(b *testing.B) {
	for _, cause := range []string{"revoke", "delete"} {
		deleteClaim := cause == "delete"
		b.Run("cause="+cause+"/impl=ashlock", func(b *testing.B) {
			benchLoss(b, ashlockTrial(b, deleteClaim, false, 0))
		})
		b.Run("cause="+cause+"/impl=ashlock-reused-name", func(b *testing.B) {
			benchLoss(b, ashlockTrial(b, deleteClaim, true, 0))
		})
		b.Run("cause="+cause+"/impl=ashlock-reused-name-after-20ms", func(b *testing.B) {
			benchLoss(b, ashlockTrial(b, deleteClaim, true, 20*time.Millisecond))
		})
	}
	b.Run("cause=revoke/impl=etcd-session", func(b *testing.B) {
		benchLoss(b, sessionTrial(b))
	})
}

func benchLoss(b *testing.B, run trial) {
	ctx := runCtx(b)
	var lat []time.Duration
	for b.Loop() {
		for range revokeTrials {
			d, err := timeLoss(ctx, run)
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, d)
		}
	}
	benchrun.ReportLatencies(b, "", lat)
}

// timeLoss runs one trial: from just before the operator's request to the
// moment a goroutine blocked on Done wakes.
func timeLoss(ctx context.Context, run trial) (time.Duration, error) {
	t, err := run(ctx)
	if err != nil {
		return 0, err
	}
	defer t.finish(ctx)
	closed := make(chan time.Time, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-t.done:
			closed <- time.Now()
		case <-stop:
		}
	}()
	start := time.Now()
	if err := t.act(ctx); err != nil {
		return 0, err
	}
	select {
	case at := <-closed:
		return at.Sub(start), nil
	case <-time.After(doneBound):
		return 0, errors.New("Done not closed within " + doneBound.String())
	}
}

// ashlockTrial acquires a lock, holds it for heldFor (untimed) and has the
// operator revoke its lease or, with deleteClaim, delete its claim key.
// With reuseName it first takes and gives back the lock, so that the
// claim is made under a name used before (a lost claim's name is not
// reused, so each trial's would otherwise be fresh). After a revoke the
// client's pooled lease is gone; the next Acquire notices and grants a
// fresh one.
func ashlockTrial(b *testing.B, deleteClaim, reuseName bool, heldFor time.Duration) trial {
	cli := newEtcd(b, nil)
	compact(b, cli)
	c, be := newAshlock(b, cli, newPrefix("revoke"))
	op := newEtcd(b, nil)
	lock := c.Lock("k")
	return func(ctx context.Context) (lossTrial, error) {
		if reuseName {
			g, err := lock.Acquire(ctx)
			if err != nil {
				return lossTrial{}, err
			}
			if err := g.Unlock(ctx); err != nil {
				return lossTrial{}, err
			}
		}
		g, err := lock.Acquire(ctx)
		if err != nil {
			return lossTrial{}, err
		}
		if heldFor > 0 {
			// The scenario, not a wait for anything: a hold of this length.
			time.Sleep(heldFor)
		}
		claim, err := g.Claim()
		if err != nil {
			return lossTrial{}, err
		}
		t := lossTrial{
			done: g.Done(),
			act: func(ctx context.Context) error {
				_, err := op.Revoke(ctx, clientv3.LeaseID(claim.Lease))
				return err
			},
			// The guard is poisoned by now; Unlock only unregisters it
			// (and reports ErrLeaseExpired, which is expected).
			finish: func(ctx context.Context) { _ = g.Unlock(ctx) },
		}
		if deleteClaim {
			t.act = func(ctx context.Context) error {
				_, err := op.Delete(ctx, be.ClaimKey(claim))
				return err
			}
		}
		return t, nil
	}
}

// sessionTrial starts an etcd Session and has the operator revoke its
// lease. Each trial needs a new Session: a revoked one stays dead.
func sessionTrial(b *testing.B) trial {
	cli := newEtcd(b, nil)
	compact(b, cli)
	op := newEtcd(b, nil)
	return func(ctx context.Context) (lossTrial, error) {
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(2), concurrency.WithContext(ctx))
		if err != nil {
			return lossTrial{}, err
		}
		return lossTrial{
			done: s.Done(),
			act: func(ctx context.Context) error {
				_, err := op.Revoke(ctx, s.Lease())
				return err
			},
			finish: func(context.Context) { _ = s.Close() },
		}, nil
	}
}
