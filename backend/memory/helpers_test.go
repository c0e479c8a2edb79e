package memory_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/memory"
)

// testTimeout bounds every wait on real time in these tests. Inside
// synctest bubbles it is fake time and costs nothing.
const testTimeout = 10 * time.Second

var idSeq atomic.Uint64

// request is a fair, waiting request with a unique ID.
func request(key string, l backend.Lease, owner string) backend.AcquireRequest {
	return backend.AcquireRequest{
		Key: key, ID: fmt.Sprintf("id-%d", idSeq.Add(1)), Lease: l.ID, Owner: owner, Wait: true, Fair: true,
	}
}

func grant(t *testing.T, b *memory.Backend, ttl time.Duration) backend.Lease {
	t.Helper()
	l, err := b.Grant(t.Context(), ttl)
	if err != nil {
		t.Fatalf("Grant(%v): %v", ttl, err)
	}
	return l
}

func mustAcquire(t *testing.T, b *memory.Backend, r backend.AcquireRequest) backend.Claim {
	t.Helper()
	c, err := b.Acquire(t.Context(), r)
	if err != nil {
		t.Fatalf("Acquire %q by %s: %v", r.Key, r.Owner, err)
	}
	return c
}

func mustRelease(t *testing.T, b *memory.Backend, c backend.Claim) {
	t.Helper()
	if err := b.Release(t.Context(), c); err != nil {
		t.Fatalf("Release %q: %v", c.Key, err)
	}
}

func inspect(t *testing.T, b *memory.Backend, key string) backend.LockInfo {
	t.Helper()
	info, err := b.Inspect(t.Context(), key)
	if err != nil {
		t.Fatalf("Inspect %q: %v", key, err)
	}
	return info
}

// newBackend returns a Backend closed at the end of the test.
func newBackend(t *testing.T, opts ...memory.Option) *memory.Backend {
	b := memory.New(opts...)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// bg is an Acquire running on its own goroutine.
type bg struct {
	done  chan struct{}
	claim backend.Claim
	err   error
}

func start(ctx context.Context, b *memory.Backend, r backend.AcquireRequest) *bg {
	p := &bg{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.claim, p.err = b.Acquire(ctx, r)
	}()
	return p
}

func (p *bg) returned() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *bg) wait(t *testing.T) (backend.Claim, error) {
	t.Helper()
	select {
	case <-p.done:
		return p.claim, p.err
	case <-time.After(testTimeout):
		t.Fatalf("Acquire did not return within %v", testTimeout)
		return backend.Claim{}, nil
	}
}

// lost records OnLost calls.
type lost struct {
	mu     sync.Mutex
	causes []error
	called chan struct{}
}

func newLost() *lost { return &lost{called: make(chan struct{})} }

func (l *lost) onLost(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.causes = append(l.causes, cause)
	if len(l.causes) == 1 {
		close(l.called)
	}
}

func (l *lost) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.causes)
}

func (l *lost) await(t *testing.T) error {
	t.Helper()
	select {
	case <-l.called:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.causes[0]
	case <-time.After(testTimeout):
		t.Fatalf("OnLost not called within %v", testTimeout)
		return nil
	}
}
