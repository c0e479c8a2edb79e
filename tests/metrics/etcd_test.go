package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// On etcd the tests run on real time. etcd grants leases of 2s at least;
// with that TTL the watchdog renews every 667ms and keeps a 200ms margin.
const (
	etcdTTL   = 2 * time.Second
	etcdBound = 15 * time.Second // bounds every wait on etcd
)

// renewSpy passes every call to the etcd backend and reports each
// KeepAlive as it starts.
type renewSpy struct {
	backend.Backend
	started chan backend.LeaseID
}

func (s *renewSpy) KeepAlive(ctx context.Context, id backend.LeaseID) (time.Duration, error) {
	select {
	case s.started <- id:
	default: // nobody is counting
	}
	return s.Backend.KeepAlive(ctx, id)
}

// etcdClient makes an etcd backend under a prefix of its own on cli, wraps
// it in a renewSpy, and connects a client recording to m (nowhere if m is
// nil). The client is closed before the backend when the test ends.
func etcdClient(t *testing.T, cli *clientv3.Client, prefix string, m *meter) (*ashlock.LockClient, *renewSpy) {
	t.Helper()
	be, err := etcd.New(cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("etcd.New: %v", err)
	}
	t.Cleanup(func() { _ = be.Close() })
	spy := &renewSpy{Backend: be, started: make(chan backend.LeaseID, 16)}
	cfg := ashlock.LockConfig{DefaultTTL: etcdTTL, Logger: quiet}
	if m != nil {
		cfg.MeterProvider = m.mp
	}
	c, err := ashlock.ConnectWith(t.Context(), cfg, spy)
	if err != nil {
		t.Fatalf("ConnectWith: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, spy
}

func etcdCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), etcdBound)
	t.Cleanup(cancel)
	return ctx
}

// eventually collects until ok accepts a snapshot, failing the test after
// etcdBound. It is for what the client records on a goroutine of its own
// after a guard's Done has closed (the end of a poisoned guard, the loss of
// its lease), which offers nothing else to wait on outside a synctest
// bubble.
func (m *meter) eventually(t *testing.T, what string, ok func(snapshot) bool) snapshot {
	t.Helper()
	deadline := time.After(etcdBound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s := m.collect(t)
		if ok(s) {
			return s
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not seen within %v", what, etcdBound)
		}
	}
}

// awaitRenewals waits until n KeepAlives of lease have started.
func awaitRenewals(t *testing.T, spy *renewSpy, lease backend.LeaseID, n int) {
	t.Helper()
	deadline := time.After(etcdBound)
	for n > 0 {
		select {
		case id := <-spy.started:
			if id == lease {
				n--
			}
		case <-deadline:
			t.Fatalf("lease %d: %d renewals still outstanding after %v", lease, n, etcdBound)
		}
	}
}

func TestEtcd(t *testing.T) {
	cluster := etcdtest.Start(t)
	cli := cluster.Client(t, nil)
	n := 0
	prefix := func() string { n++; return fmt.Sprintf("metrics-test/%d/", n) }

	t.Run("acquire outcomes, durations and held", func(t *testing.T) {
		m := newMeter(t)
		p := prefix()
		c, _ := etcdClient(t, cli, p, m)
		holder, _ := etcdClient(t, cli, p, nil)
		ctx := etcdCtx(t)
		const (
			free = "tenant-9b2e/orders/4711"
			busy = "tenant-9b2e/orders/4712"
		)

		g, err := c.Lock(free).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hg, err := holder.Lock(busy).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer runtime.KeepAlive(hg) // a Guard dropped without Unlock is released
		if _, err := c.Lock(busy).TryAcquire(ctx); !errors.Is(err, ashlock.ErrLocked) {
			t.Fatalf("TryAcquire of a held key = %v, want ErrLocked", err)
		}
		const patience = 300 * time.Millisecond
		tctx, cancel := context.WithTimeout(ctx, patience)
		_, err = c.Lock(busy).Acquire(tctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timed-out Acquire = %v, want DeadlineExceeded", err)
		}

		s := m.collect(t)
		for o, want := range map[string]uint64{"acquired": 1, "locked": 1, "cancelled": 1, "lease_expired": 0, "error": 0} {
			if got := s.hist(t, acquireDuration, outcome(o)).Count; got != want {
				t.Errorf("%s{outcome=%s} count = %d, want %d", acquireDuration, o, got, want)
			}
		}
		if c := s.hist(t, acquireDuration, outcome("cancelled")); c.Sum < patience.Seconds() {
			t.Errorf("timed-out acquisition recorded as %vs, want at least %v", c.Sum, patience)
		}
		if w := s.hist(t, waitDuration, noAttrs); w.Count != 1 || w.Sum <= 0 {
			t.Errorf("%s = %d samples summing to %vs, want 1 positive", waitDuration, w.Count, w.Sum)
		}
		if got := s.sum(t, held, noAttrs); got != 1 {
			t.Errorf("%s = %d with one guard held, want 1", held, got)
		}

		if err := g.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		s = m.collect(t)
		if got := s.sum(t, held, noAttrs); got != 0 {
			t.Errorf("%s = %d after Unlock, want 0", held, got)
		}
		if h := s.hist(t, holdDuration, noAttrs); h.Count != 1 || h.Sum <= 0 {
			t.Errorf("%s = %d samples summing to %vs, want 1 positive", holdDuration, h.Count, h.Sum)
		}

		for _, k := range []string{free, "tenant-9b2e/jobs/nightly"} {
			g, err := c.Lock(k).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer runtime.KeepAlive(g) // a Guard dropped without Unlock is released
		}
		if got := m.collect(t).sum(t, held, noAttrs); got != 2 {
			t.Fatalf("%s = %d with two guards held, want 2", held, got)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		s = m.collect(t)
		if got := s.sum(t, held, noAttrs); got != 0 {
			t.Errorf("%s = %d after Close, want 0", held, got)
		}
		assertNoLockKeys(t, s, free, busy, "tenant-9b2e")
	})

	t.Run("renewals and margin", func(t *testing.T) {
		m := newMeter(t)
		c, spy := etcdClient(t, cli, prefix(), m)
		g, err := c.Lock("tenant-9b2e/renewed").Acquire(etcdCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		claim, err := g.Claim()
		if err != nil {
			t.Fatal(err)
		}
		// The watchdog never renews a lease twice at once, and it records a
		// renewal's outcome and margin before it lets the next one start:
		// once the third has started, two are on record.
		awaitRenewals(t, spy, claim.Lease, 3)
		s := m.collect(t)
		ok := s.sum(t, renewals, outcome("ok"))
		if ok < 2 {
			t.Errorf("%s{outcome=ok} = %d after 3 renewals started, want at least 2", renewals, ok)
		}
		for _, o := range []string{"error", "lease_expired"} {
			if got := s.sum(t, renewals, outcome(o)); got != 0 {
				t.Errorf("%s{outcome=%s} = %d against a healthy etcd, want 0", renewals, o, got)
			}
		}
		// The third renewal may have been counted and not yet had its
		// margin recorded when the reader collected.
		mg := s.hist(t, renewMargin, noAttrs)
		if d := ok - int64(mg.Count); d < 0 || d > 1 {
			t.Errorf("%s has %d samples for %d successful renewals", renewMargin, mg.Count, ok)
		}
		lo, _ := mg.Min.Value()
		hi, _ := mg.Max.Value()
		if lo <= 0 || hi >= etcdTTL.Seconds() {
			t.Errorf("%s in [%v, %v]s, want within (0, %v)", renewMargin, lo, hi, etcdTTL)
		}
		if got := s.sum(t, leasesLost, noAttrs); got != 0 {
			t.Errorf("%s = %d against a healthy etcd, want 0", leasesLost, got)
		}
		assertNoLockKeys(t, s, "tenant-9b2e")
	})

	t.Run("poisoning by a revoked lease", func(t *testing.T) {
		m := newMeter(t)
		c, spy := etcdClient(t, cli, prefix(), m)
		ctx := etcdCtx(t)
		gs := make([]*ashlock.Guard, 0, 2)
		for _, k := range []string{"tenant-9b2e/a", "tenant-9b2e/b"} {
			g, err := c.Lock(k).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			gs = append(gs, g)
		}
		claim, err := gs[0].Claim()
		if err != nil {
			t.Fatal(err)
		}
		// An operator revokes the client's lease behind its back.
		if err := spy.Backend.Revoke(ctx, claim.Lease); err != nil {
			t.Fatalf("Revoke: %v", err)
		}
		for _, g := range gs {
			select {
			case <-g.Done():
			case <-time.After(etcdBound):
				t.Fatalf("guard on %q still valid %v after its lease was revoked", g.Key(), etcdBound)
			}
		}
		s := m.eventually(t, "held back to 0 and the lease counted lost", func(s snapshot) bool {
			return s.sum(t, held, noAttrs) == 0 && s.sum(t, leasesLost, noAttrs) >= 1
		})
		if got := s.sum(t, leasesLost, noAttrs); got != 1 {
			t.Errorf("%s = %d after one lease was revoked, want 1", leasesLost, got)
		}
		if got := s.sum(t, renewals, outcome("lease_expired")); got < 1 {
			t.Errorf("%s{outcome=lease_expired} = %d after a revoke, want at least 1", renewals, got)
		}
		for _, g := range gs {
			if err := g.Unlock(ctx); !errors.Is(err, ashlock.ErrLeaseExpired) {
				t.Errorf("Unlock(%q) of a poisoned guard = %v, want ErrLeaseExpired", g.Key(), err)
			}
		}
		if got := m.collect(t).sum(t, held, noAttrs); got != 0 {
			t.Errorf("%s = %d after unlocking poisoned guards, want still 0", held, got)
		}
	})
}
