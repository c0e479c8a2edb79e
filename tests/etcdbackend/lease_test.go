package etcdbackend_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// etcd leases are whole seconds: a TTL is rounded up, never down, and
// Grant reports what etcd granted (it raises TTLs below its minimum, 2s
// with etcdtest's timing).
func TestGrantRoundsUp(t *testing.T) {
	b, _ := newBackend(t, shared, uniquePrefix(t))
	tests := []struct {
		name      string
		ask, want time.Duration
	}{
		{"BelowMinimum", 100 * time.Millisecond, 2 * time.Second},
		{"Fraction", 2100 * time.Millisecond, 3 * time.Second},
		{"Whole", 4 * time.Second, 4 * time.Second},
		{"JustAbove", 4*time.Second + time.Nanosecond, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := grant(t, b, tt.ask)
			if l.TTL != tt.want {
				t.Errorf("Grant(%v) granted %v, want %v", tt.ask, l.TTL, tt.want)
			}
			ttl, err := b.KeepAlive(testCtx(t, waitBound), l.ID)
			if err != nil || ttl != tt.want {
				t.Errorf("KeepAlive: %v, %v; want %v", ttl, err, tt.want)
			}
		})
	}
}

// Renewals of different leases share one stream; each caller still gets
// the answer for its own lease.
func TestConcurrentKeepAlivesGetTheirOwnTTL(t *testing.T) {
	b, _ := newBackend(t, shared, uniquePrefix(t))
	leases := []backend.Lease{grant(t, b, 3*time.Second), grant(t, b, 7*time.Second), grant(t, b, 11*time.Second)}
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for g := range 12 {
		l := leases[g%len(leases)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				ttl, err := b.KeepAlive(testCtx(t, waitBound), l.ID)
				if err != nil || ttl != l.TTL {
					errs <- "lease " + l.TTL.String() + ": renewed for " + ttl.String() + " " + errString(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
