package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/backend/etcd"
	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// etcdStore is a three-member embedded etcd cluster (tests/etcdtest, with
// its Partition and Leader), an admin client straight to its members, and
// a directory for the routes' unix sockets.
type etcdStore struct {
	cl      *etcdtest.Cluster
	admin   *clientv3.Client
	sockDir string
}

func launchEtcd(ctx context.Context) (*etcdStore, error) {
	s := &etcdStore{}
	var err error
	if s.cl, err = etcdtest.Launch(ctx, etcdtest.Options{Members: 3}); err != nil {
		return nil, err
	}
	if s.admin, err = newEtcdClient(s.cl.Endpoints()); err != nil {
		return nil, errors.Join(err, s.close())
	}
	// Unix socket paths are short-lived and must stay under ~100 bytes.
	if s.sockDir, err = os.MkdirTemp("", "ashchaos"); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return s, nil
}

func (s *etcdStore) newRoute(name string) (route, error) {
	return newEtcdRoute(s.sockDir, name, s.cl.Endpoints())
}

func (s *etcdStore) inspector(_ context.Context, prefix string) (backend.Backend, error) {
	return etcd.New(s.admin, etcd.WithPrefix(prefix))
}

func (s *etcdStore) initRegister(ctx context.Context, name string) (int64, error) {
	return initRegister(ctx, s.admin, name)
}

func (s *etcdStore) registerRecord(ctx context.Context, name string, from int64) ([]applied, error) {
	return registerRecord(ctx, s.admin, name, from)
}

func (s *etcdStore) leftovers(ctx context.Context, prefix string) ([]string, error) {
	return leasedKeys(ctx, s.admin, prefix)
}

// revokeLease finds the claim by its token - its create revision - and
// revokes its lease.
func (s *etcdStore) revokeLease(ctx context.Context, prefix, _ string, token uint64) (string, bool, error) {
	// Not with WithKeysOnly: etcd 3.7 leaves the lease out of keys-only
	// answers.
	resp, err := s.admin.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return "", false, fmt.Errorf("list claims: %w", err)
	}
	var lease int64
	for _, kv := range resp.Kvs {
		if uint64(kv.CreateRevision) == token && kv.Lease != 0 {
			lease = kv.Lease
		}
	}
	if lease == 0 {
		return "", false, nil
	}
	if _, err := s.admin.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		return "", true, fmt.Errorf("revoke lease %x: %w", lease, err)
	}
	return fmt.Sprintf("lease %x", lease), true, nil
}

func (s *etcdStore) serverFault(ctx context.Context, f fault, logf func(string, ...any)) (string, func() error, error) {
	switch f.kind {
	case faultLeaderKill:
		i, kind := s.cl.Leader(), "leader-kill"
		if i < 0 {
			// Mid-election: crash a member anyway.
			i, kind = int(f.pick%3), "member-kill (no leader at the time)"
		}
		s.cl.StopMember(i)
		logf("fault %v: stopped member %d", f, i)
		return kind, func() error {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), memberTimeout)
			defer cancel()
			return s.cl.RestartMember(rctx, i)
		}, nil
	case faultPartition:
		i := s.cl.Leader()
		if i < 0 || f.pick%2 == 1 {
			i = int(f.pick % 3)
		}
		if err := s.cl.Partition(i); err != nil {
			return "", nil, err
		}
		logf("fault %v: cut member %d off", f, i)
		return "member-partition", func() error { s.cl.Heal(); return nil }, nil
	}
	return "", nil, fmt.Errorf("etcd: no fault %v", f.kind)
}

func (s *etcdStore) close() error {
	var errs []error
	if s.admin != nil {
		if err := s.admin.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if s.cl != nil {
		errs = append(errs, s.cl.Close())
	}
	if s.sockDir != "" {
		errs = append(errs, os.RemoveAll(s.sockDir))
	}
	return errors.Join(errs...)
}

// etcdConn is a holder's etcd client through its route.
type etcdConn struct{ cli *clientv3.Client }

func openEtcdConn(ep endpoint) (*etcdConn, error) {
	cli, err := newEtcdClient(ep.Endpoints)
	if err != nil {
		return nil, err
	}
	return &etcdConn{cli: cli}, nil
}

func (c *etcdConn) newBackend(_ context.Context, prefix string) (backend.Backend, error) {
	return etcd.New(c.cli, etcd.WithPrefix(prefix))
}

func (c *etcdConn) register(be backend.Backend, name, _ string, unguarded bool) register {
	eb, _ := be.(*etcd.Backend) // nil for a session locker's holder
	return &etcdRegister{cli: c.cli, be: eb, key: name, unguarded: unguarded}
}

func (c *etcdConn) close() error {
	if err := c.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// etcdRegister is the register at an etcd key, read and written in Txns
// guarded by the holder's ownership comparison: the Backend's IsOwner for
// an ashlock guard, the mutex's for the control's sessions.
type etcdRegister struct {
	cli       *clientv3.Client
	be        *etcd.Backend
	key       string
	unguarded bool
}

func (r *etcdRegister) owns(hd held) clientv3.Cmp {
	if r.unguarded {
		return alwaysHolds(r.key)
	}
	if s, ok := hd.(*sessionHeld); ok {
		return s.cmp
	}
	return r.be.IsOwner(hd.(*libHeld).c)
}

func (r *etcdRegister) read(ctx context.Context, hd held) (int64, status) {
	return registerRead(ctx, r.cli, r.key, r.owns(hd))
}

func (r *etcdRegister) write(ctx context.Context, hd held, value int64, tag string) status {
	return registerWrite(ctx, r.cli, r.key, r.owns(hd), value, tag)
}
