package etcdbackend_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/ash-lock/ashlock/backend"
)

// requestSizes records the size of the largest request a client sends,
// per gRPC method.
type requestSizes struct {
	mu      sync.Mutex
	largest map[string]int
}

// configure installs the interceptor; pass it to newBackend.
func (s *requestSizes) configure(cfg *clientv3.Config) {
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(s.intercept))
}

func (s *requestSizes) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m, ok := req.(proto.Message); ok {
		n := proto.Size(m)
		s.mu.Lock()
		if s.largest == nil {
			s.largest = make(map[string]int)
		}
		s.largest[method] = max(s.largest[method], n)
		s.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// top returns the size of the largest request recorded and its method.
func (s *requestSizes) top() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	method, n := "", 0
	for m, size := range s.largest {
		if size > n {
			method, n = m, size
		}
	}
	return method, n
}

// raftHeadroom bounds what etcd adds to a write request when it wraps it
// for raft (a request header, without authentication); the wrapped request
// is what must fit in --max-request-bytes.
const raftHeadroom = 1 << 10

// worstKeys returns backend.MaxKeys distinct, sorted keys of the longest
// length a key may have (1024 bytes), made of the byte the etcd key
// escaping expands (each '/' becomes "%2F").
func worstKeys() []string {
	keys := make([]string, backend.MaxKeys)
	for i := range keys {
		k := fmt.Sprintf("%02d", i)
		keys[i] = k + strings.Repeat("/", 1024-len(k))
	}
	return keys
}

// longestPrefix pads a test's unique prefix to the longest prefix
// etcd.WithPrefix accepts (256 bytes).
func longestPrefix(t testing.TB) string {
	p := uniquePrefix(t)
	return p[:len(p)-1] + strings.Repeat("_", 256-len(p)) + "/"
}

// A multi-key claim of the most keys allowed, each of the longest length
// allowed and made of the byte the key escaping expands, under the longest
// prefix and owner label allowed, with stamps on and with the largest value
// allowed (and with none): every request of every path that makes, stamps,
// waits for, rewrites or releases it - exclusive and shared, fair and not
// queued (TryAcquire), held at once and after a wait - fits within etcd's
// default request size limit, and nothing is left behind.
func TestMultiKeyLargestRequestsFit(t *testing.T) {
	all := worstKeys()
	owner := strings.Repeat("o", 256)
	for _, value := range []int{0, backend.MaxValueTotal / len(all)} {
		for _, sharedClaim := range []bool{false, true} {
			t.Run(fmt.Sprintf("value %d shared %v", value, sharedClaim), func(t *testing.T) {
				prefix := longestPrefix(t)
				sizes := &requestSizes{}
				b, operator := newBackend(t, shared, prefix, sizes.configure)
				l := grant(t, b, 30*time.Second)
				multi := func(wait, fair bool) backend.AcquireRequest {
					r := request(all[0], l, owner)
					r.Keys, r.Shared, r.Stamp = all, sharedClaim, nextStamp
					r.Value = make([]byte, value)
					r.Wait, r.Fair = wait, fair
					return r
				}
				blocker := func() backend.Claim { return acquire(t, b, request(all[len(all)-1], l, "blocker")) }

				// TryAcquire, blocked and then free.
				h := blocker()
				_, err := b.Acquire(testCtx(t, waitBound), multi(false, false))
				require.ErrorIs(t, err, backend.ErrLocked, "TryAcquire of held keys")
				release(t, b, h)
				c := acquire(t, b, multi(false, false))
				require.NoError(t, b.SetValue(testCtx(t, waitBound), c, make([]byte, value)))
				release(t, b, c)

				// Fair, held at once and after a wait.
				c = acquire(t, b, multi(true, true))
				release(t, b, c)
				h = blocker()
				ch := start(testCtx(t, waitBound), b, multi(true, true))
				awaitCount(t, operator, prefix+"claims/", int64(1+len(all)))
				release(t, b, h)
				got := await(t, ch, "fair LockAll after a wait")
				require.NoError(t, got.err, "fair LockAll after a wait")

				// A release compared on the claim's identity at every key,
				// by a Backend that did not hand the claim out (b then
				// removes what it takes for the rest of a lost claim, the
				// same way).
				other, _ := newBackend(t, shared, prefix, sizes.configure)
				release(t, other, got.claim)
				awaitCount(t, operator, prefix+"claims/", 0)

				method, n := sizes.top()
				t.Logf("largest request: %d bytes (%s)", n, method)
				assert.LessOrEqual(t, n, int(embed.DefaultMaxRequestBytes)-raftHeadroom, "largest request (%s)", method)
			})
		}
	}
}

// afterFailedTxn runs do once, when armed, after a Txn whose compares
// failed and which had no reads to run then (no Else branch) returns.
type afterFailedTxn struct {
	armed atomic.Bool
	fired atomic.Bool
	do    func()
}

func (h *afterFailedTxn) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	txn, ok := req.(*pb.TxnRequest)
	resp, _ := reply.(*pb.TxnResponse)
	if ok && err == nil && len(txn.Compare) > 0 && len(txn.Failure) == 0 && !resp.Succeeded && h.armed.CompareAndSwap(true, false) {
		h.do()
		h.fired.Store(true)
	}
	return err
}

// With the longest keys and the largest value, a multi-key request that
// does not queue sends its Txn without the reads of what blocks it, and
// reads in a request of its own once the Txn failed. What it reads then
// may differ from what the Txn saw: a stray claim under its own name is
// removed and the keys taken (a shared request's Txn finds it as it puts); a blocker gone by then makes TryAcquire
// fail with ErrLocked (the keys were held when it tried) and a waiting
// request try again and take the keys. Nothing is left behind.
func TestMultiKeyLargestRequestReadsApart(t *testing.T) {
	all := worstKeys()
	value := backend.MaxValueTotal / len(all)
	for _, sharedClaim := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared %v", sharedClaim), func(t *testing.T) {
			prefix := longestPrefix(t)
			hook := &afterFailedTxn{}
			b, operator := newBackend(t, shared, prefix, func(cfg *clientv3.Config) {
				cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(hook.intercept))
			})
			l := grant(t, b, 30*time.Second)
			multi := func(wait bool) backend.AcquireRequest {
				r := request(all[0], l, "all")
				r.Keys, r.Shared, r.Value = all, sharedClaim, make([]byte, value)
				r.Wait, r.Fair = wait, false
				return r
			}

			for _, wait := range []bool{false, true} {
				h := acquire(t, b, request(all[len(all)-1], l, "blocker"))
				hook.do = func() { release(t, b, h) }
				hook.fired.Store(false)
				hook.armed.Store(true)
				c, err := b.Acquire(testCtx(t, waitBound), multi(wait))
				require.True(t, hook.fired.Load(), "wait %v: no failed Txn without reads", wait)
				if !wait {
					require.ErrorIs(t, err, backend.ErrLocked, "TryAcquire whose blocker went before the reads")
					assert.Empty(t, keys(t, operator, prefix+"claims/"), "claims left")
					continue
				}
				require.NoError(t, err, "non-fair LockAll whose blocker went before the reads")
				release(t, b, c)
			}

			// A stray under the name the next acquisition uses, at one key.
			first := acquire(t, b, multi(false))
			release(t, b, first)
			stray := prefix + "claims/" + strings.ReplaceAll(all[1], "/", "%2F") + "/" + first.ID
			_, err := operator.Put(testCtx(t, waitBound), stray, "", clientv3.WithLease(clientv3.LeaseID(l.ID)))
			require.NoError(t, err)
			hook.do = func() {}
			hook.fired.Store(false)
			hook.armed.Store(true)
			c := acquire(t, b, multi(false))
			// A shared claim's Txn does not fail on a stray under its name:
			// its put finds it.
			require.Equal(t, !sharedClaim, hook.fired.Load(), "a failed Txn without reads")
			assert.Equal(t, first.ID, c.ID, "claim name")
			assert.Len(t, keys(t, operator, prefix+"claims/"), len(all), "claims while held")
			release(t, b, c)
			assert.Empty(t, keys(t, operator, prefix+"claims/"), "claims left")
		})
	}
}
