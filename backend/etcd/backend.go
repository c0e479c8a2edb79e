package etcd

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ash-lock/ashlock/backend"
)

// cleanupTimeout bounds each call a Backend makes on its own behalf, when
// the caller's context cannot be used: removing the claim of a failed
// Acquire, reading the keys of watches that cannot see a delete.
const cleanupTimeout = 5 * time.Second

// endedCleanupTimeout bounds the removal a failed Acquire makes before
// returning when the caller's context has already ended: the caller is
// owed a prompt return, and a removal that does not fit is retried in the
// background.
const endedCleanupTimeout = time.Second

// Backend is a backend.Backend that keeps claims in etcd v3. Create it with
// New; it is safe for concurrent use. The zero value is not usable.
type Backend struct {
	cli    *clientv3.Client
	layout layout
	reg    *registry
	fenced atomic.Int64               // a revision etcd answered at, at or above every fence this Backend knows (fence.go)
	fence  atomic.Pointer[leaseFence] // the last lease's fence key (fenceKey)

	ctx    context.Context // cancelled by Close; ends the Backend's goroutines
	cancel context.CancelFunc

	// spawnMu orders spawn's wg.Add with Close's wg.Wait: once stopping is
	// set no goroutine is added, so Wait cannot race with an Add.
	spawnMu  sync.Mutex
	stopping bool
	wg       sync.WaitGroup
}

var _ backend.ClaimNamer = (*Backend)(nil)

// NamesClaims marks the Backend as naming its claims itself
// (backend.ClaimNamer): a claim is named after its lease (see the package
// documentation), so the client makes no ID for it.
func (b *Backend) NamesClaims() {}

// New returns a Backend that stores claims through cli under the prefix set
// by WithPrefix (default "ashlock/").
//
// The caller keeps ownership of cli: it configures endpoints, TLS and
// authentication, and closes cli after closing the Backend. New does not
// contact etcd and starts no goroutine; on first use the Backend starts
// two that serve its watch stream, however many claims it watches. It
// fails if cli is nil or the prefix is invalid (the error wraps
// ErrBadPrefix).
func New(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, errors.New("etcd: New needs a client, got nil")
	}
	l := layout{prefix: DefaultPrefix}
	for _, o := range opts {
		o(&l)
	}
	if err := validatePrefix(l.prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{cli: cli, layout: l, ctx: ctx, cancel: cancel}
	// What is left of a held multi-key claim lost at one of its keys (see
	// entry.notify) is removed, compared on the claim's identity at
	// every key, and then its name freed. The watch that saw the loss
	// calls this, so it only spawns the work, which tries until it
	// succeeds or the Backend is closed (and does not hold up Close).
	abandon := func(e *entry, token int64) { b.spawn(func() { b.removeUntilGone(e, token, true) }) }
	b.reg = newRegistry(newMux(ctx, cli, b.spawn), abandon)
	return b, nil
}

// spawn runs f in a goroutine that Close waits for. It reports false, and
// runs nothing, once Close has begun.
func (b *Backend) spawn(f func()) bool {
	b.spawnMu.Lock()
	defer b.spawnMu.Unlock()
	if b.stopping {
		return false
	}
	b.wg.Go(f)
	return true
}

// closed returns the error of a call made on a closed Backend, or nil.
func (b *Backend) closed(op string) error {
	if b.ctx.Err() != nil {
		return closedError(op)
	}
	return nil
}

// Prefix returns the etcd key prefix under which the Backend keeps its keys.
func (b *Backend) Prefix() string { return b.layout.prefix }

// ClaimKey returns the etcd key that stores claim c, for operators and
// tests that want to look at or delete it by hand.
func (b *Backend) ClaimKey(c backend.Claim) string { return b.layout.claim(c.Key, c.ID) }

// IsOwner returns a comparison that holds exactly while claim c still
// exists as the same incarnation (its create revision equals c.Token).
// Put it in your own etcd Txn so that a write to state kept in etcd commits
// only while the lock is held:
//
//	cli.Txn(ctx).If(b.IsOwner(claim)).Then(clientv3.OpPut("balance", "42")).Commit()
//
// The claim holds its key for as long as it exists, because a claim only
// ever moves towards the head of its queue. For a multi-key claim it
// compares the claim at c.Key; a claim is created and released at all its
// keys at once, and lost at one only with its lease or by an operator's
// delete. IsOwner makes no call to etcd.
func (b *Backend) IsOwner(c backend.Claim) clientv3.Cmp {
	return incarnation(b.ClaimKey(c), int64(c.Token))
}

// incarnation holds while the etcd key exists as the claim created at
// revision token: a claim's identity, whatever its name.
func incarnation(key string, token int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", token)
}

// Close stops the Backend's goroutines (the watch stream and background
// cleanups) and waits for them. It does not remove claims, revoke leases
// or close the etcd client; a claim whose background removal is still
// pending when Close is called stays until its lease ends. Acquire calls
// still waiting return ErrClosed; after Close, OnLost is no longer called
// and every method returns an error wrapping backend.ErrClosed. A second
// Close returns that error too.
func (b *Backend) Close() error {
	b.spawnMu.Lock()
	again := b.stopping
	b.stopping = true
	b.spawnMu.Unlock()
	if again {
		return closedError("close")
	}
	b.cancel()
	b.wg.Wait()
	return nil
}
