package etcdbackend_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

const (
	rootPassword   = "root-secret"
	lockerPassword = "locker-secret"
)

// startWithAuth starts a server with authentication on: root, and a user
// "locker" whose only role may read and write the range of prefix. A user
// "stranger" has a role on another range only.
func startWithAuth(t *testing.T, prefix string) *etcdtest.Cluster {
	t.Helper()
	c := etcdtest.Start(t)
	cli := c.Client(t)
	ctx := testCtx(t, waitBound)
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "ashlock"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "ashlock", prefix, clientv3.GetPrefixRangeEnd(prefix),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "locker", lockerPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "locker", "ashlock"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "elsewhere"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "elsewhere", "other/", clientv3.GetPrefixRangeEnd("other/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, "stranger", lockerPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "stranger", "elsewhere"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	return c
}

func credentials(user, password string) func(*clientv3.Config) {
	return func(cfg *clientv3.Config) { cfg.Username, cfg.Password = user, password }
}

// With authentication on, a user whose role covers the prefix and nothing
// else can do everything: grant, renew, acquire fair and not, wait, stamp,
// inspect, see losses, release, revoke.
func TestAuthPrefixRoleIsEnough(t *testing.T) {
	prefix := "app/"
	c := startWithAuth(t, prefix)
	cli := c.Client(t, credentials("locker", lockerPassword))
	b, err := etcd.New(cli, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	l := grant(t, b, 5*time.Second)
	if ttl, err := b.KeepAlive(testCtx(t, waitBound), l.ID); err != nil || ttl < 5*time.Second {
		t.Fatalf("KeepAlive: %v, %v", ttl, err)
	}
	r := request("k", l, "A")
	r.Stamp = nextStamp
	holder := acquire(t, b, r)

	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	fair := start(ctx, b, request("k", l, "W"))
	unfairReq := request("k", l, "N")
	unfairReq.Fair = false
	unfair := start(ctx, b, unfairReq)
	awaitCount(t, cli, prefix+"claims/", 2)
	info, err := b.Inspect(testCtx(t, waitBound), "k")
	if err != nil || info.Owner != "A" || len(info.Waiters) != 1 {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	if err := b.Release(testCtx(t, waitBound), holder); err != nil {
		t.Fatal(err)
	}
	w := await(t, fair, "fair waiter")
	if w.err != nil {
		t.Fatal(w.err)
	}
	if err := b.Release(testCtx(t, waitBound), w.claim); err != nil {
		t.Fatal(err)
	}
	n := await(t, unfair, "non-fair waiter")
	if n.err != nil {
		t.Fatal(n.err)
	}

	lost := newLostSignal()
	lr := request("lost", grant(t, b, 30*time.Second), "L")
	lr.OnLost = backend.LossFunc(lost.onLost)
	lc := acquire(t, b, lr)
	at := time.Now()
	if err := b.Revoke(testCtx(t, waitBound), lc.Lease); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	lost.await(t, lossBound, at)
	if err := b.Release(testCtx(t, waitBound), n.claim); err != nil {
		t.Fatal(err)
	}
}

// Credentials that etcd refuses give an error that says so.
func TestAuthFailuresAreClear(t *testing.T) {
	prefix := "app/"
	c := startWithAuth(t, prefix)
	tests := []struct {
		name, user, password string
		want                 string // in the error message
	}{
		{"WrongPassword", "locker", "wrong", "authentication failed"},
		{"UnknownUser", "nobody", "x", "authentication failed"},
		{"NoPermissionOnPrefix", "stranger", lockerPassword, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cli, err := c.NewClient(credentials(tt.user, tt.password))
			if err != nil {
				// clientv3 may authenticate while connecting.
				if !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("clientv3.New: %v, want it to mention %q", err, tt.want)
				}
				t.Logf("clientv3.New error: %v", err)
				return
			}
			t.Cleanup(func() { cli.Close() })
			b, err := etcd.New(cli, etcd.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = b.Inspect(ctx, "k")
			if err == nil {
				l, gerr := b.Grant(ctx, 5*time.Second)
				err = gerr
				if gerr == nil {
					_, err = b.Acquire(ctx, request("k", l, "x"))
				}
			}
			if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want ErrUnavailable mentioning %q", err, tt.want)
			}
			t.Logf("backend error: %v", err)

			// An Observe fails with it too, once, rather than retry for ever.
			var errs []error
			for _, err := range b.Observe(ctx, "k") {
				errs = append(errs, err)
			}
			require.NoError(t, ctx.Err(), "Observe ended by its context, without an error")
			require.Len(t, errs, 1)
			assert.ErrorIs(t, errs[0], backend.ErrUnavailable)
			assert.Contains(t, errs[0].Error(), tt.want)
		})
	}
}
