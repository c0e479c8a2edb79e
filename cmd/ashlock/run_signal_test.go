//go:build unix

package main

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend"
)

// A signal that comes after the lock was granted but before the command
// started counts as one that came during the wait: the lock is released,
// the command never starts, and the run exits 75.
func TestRunSignalBeforeTheCommandStarts(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run("SIG"+signalName(sig)+" cancels", func(t *testing.T) {
			f := newFixture(t)
			f.env.beforeStart = func() { f.sigs <- sig }
			marker := filepath.Join(t.TempDir(), "ran")
			code := f.run("run", "job", "--", "touch", marker)
			assert.Equal(t, exitNotAcquired, code, "stderr %q", f.stderr)
			assertNotRan(t, marker)
			assert.Contains(t, f.stderr.String(), "cancelled by SIG"+signalName(sig))
			info := f.inspect("job")
			assert.False(t, info.Held, "lock not released: %+v", info)
			assert.Empty(t, info.Waiters)
		})
	}
	t.Run("quiet", func(t *testing.T) {
		f := newFixture(t)
		f.env.beforeStart = func() { f.sigs <- syscall.SIGTERM }
		marker := filepath.Join(t.TempDir(), "ran")
		assert.Equal(t, exitNotAcquired, f.run("run", "--quiet", "job", "--", "touch", marker))
		assertNotRan(t, marker)
		assert.Empty(t, f.stderr.String())
		assert.False(t, f.inspect("job").Held)
	})
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		t.Run("SIG"+signalName(sig)+" is dropped", func(t *testing.T) {
			f := newFixture(t)
			f.env.beforeStart = func() { f.sigs <- sig }
			// Forwarded, the signal's default action would end the shell.
			code := f.run("run", "job", "--", "sh", "-c", "echo ran; exit 3")
			assert.Equal(t, 3, code, "stderr %q", f.stderr)
			assert.Equal(t, "ran\n", f.stdout.String())
		})
	}
}

// stallingRelease passes every call on to a backend except Release, which
// waits until the test lets it go, as one to an unreachable etcd would.
// It ignores its context on purpose: the test must find the release still
// going when the run exits, however slow the machine.
type stallingRelease struct {
	backend.Backend
	entered  chan struct{} // closed when Release is called
	unblock  chan struct{} // closed by the test to let Release go on
	returned chan struct{} // closed when Release returns
	once     sync.Once
}

func newStallingRelease(be backend.Backend) *stallingRelease {
	return &stallingRelease{
		Backend:  be,
		entered:  make(chan struct{}),
		unblock:  make(chan struct{}),
		returned: make(chan struct{}),
	}
}

func (s *stallingRelease) Release(ctx context.Context, c backend.Claim) error {
	first := false
	s.once.Do(func() { first = true })
	if !first {
		return s.Backend.Release(ctx, c)
	}
	defer close(s.returned)
	close(s.entered)
	select {
	case <-s.unblock:
	case <-time.After(testTimeout):
	}
	return s.Backend.Release(context.WithoutCancel(ctx), c)
}

// waitClosed waits for c to be closed, failing the test after testTimeout.
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(testTimeout):
		require.FailNow(t, "timed out waiting for "+what)
	}
}

// A signal that comes while ashlock releases the lock after the command
// has exited ends the wait for the release: the run exits at once with the
// status it would have had, and the claim is left to lapse.
func TestRunSignalDuringTheFinalRelease(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run("SIG"+signalName(sig), func(t *testing.T) {
			f := newFixture(t)
			be := newStallingRelease(f.backend)
			f.env.connect = func(ctx context.Context, cfg ashlock.LockConfig) (*ashlock.LockClient, error) {
				return ashlock.ConnectWith(ctx, cfg, be)
			}
			t.Cleanup(func() {
				// Let the abandoned release finish, so that nothing of the
				// run outlives the test.
				close(be.unblock)
				waitClosed(t, be.returned, "the abandoned release to return")
				// t.Context is done by now: inspect with a context of its own.
				eventually(t, "job to be free", func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
					defer cancel()
					info, err := f.client.Inspect(ctx, "job")
					return err == nil && !info.Held
				})
			})
			codec := f.start("run", "job", "--", "sh", "-c", "exit 3")
			waitClosed(t, be.entered, "the release to start")
			f.sigs <- sig
			code := f.wait(codec)
			select {
			case <-be.returned:
				require.Fail(t, "the run waited for the release to end")
			default:
			}
			assert.Equal(t, 3, code, "exit code is not the command's; stderr %q", f.stderr)
			assert.Contains(t, f.stderr.String(), "SIG"+signalName(sig))
			assert.Contains(t, f.stderr.String(), "not waiting for the release")
		})
	}
	// USR1 and USR2 have no command left to go to: they are dropped, and
	// the release is waited for.
	t.Run("SIGUSR1 is dropped", func(t *testing.T) {
		f := newFixture(t)
		be := newStallingRelease(f.backend)
		f.env.connect = func(ctx context.Context, cfg ashlock.LockConfig) (*ashlock.LockClient, error) {
			return ashlock.ConnectWith(ctx, cfg, be)
		}
		codec := f.start("run", "job", "--", "sh", "-c", "exit 3")
		waitClosed(t, be.entered, "the release to start")
		f.sigs <- syscall.SIGUSR1
		close(be.unblock)
		assert.Equal(t, 3, f.wait(codec), "stderr %q", f.stderr)
		waitClosed(t, be.returned, "the release to return") // closed already: the run waited
		assert.NotContains(t, f.stderr.String(), "not waiting for the release")
		assert.False(t, f.inspect("job").Held)
	})
}
