package etcd

import (
	"context"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// keeper sends the keep-alive requests of all of a Backend's leases over one
// long-lived LeaseKeepAlive stream.
//
// clientv3's Lease.KeepAlive is not used on purpose: it renews on its own
// timer, whereas in ashlock the watchdog decides when to renew and needs,
// for each renewal, the TTL etcd granted in answer to a request whose send
// time it measured. KeepAliveOnce would open a stream per renewal; one
// stream for the Backend's lifetime avoids that.
//
// etcd answers the requests of a stream one at a time, in order, so the
// answers for a lease arrive in the order its requests were sent. The keeper
// keeps a FIFO of waiting callers per lease and hands each answer to the
// oldest one. A caller that gives up (its ctx ended) keeps its slot, so the
// answer to its request is dropped rather than given to a later caller whose
// request was sent later: crediting a renewal to a later send time would
// overstate the lease (guarantee 3).
type keeper struct {
	lc    pb.LeaseClient
	ctx   context.Context   // the Backend's lifetime
	spawn func(func()) bool // Backend.spawn

	mu      sync.Mutex
	cur     *kaStream     // open stream, nil if none
	opening chan struct{} // non-nil while a stream is being opened; closed when done
	openErr error         // result of the last failed open
}

type kaStream struct {
	stream grpc.BidiStreamingClient[pb.LeaseKeepAliveRequest, pb.LeaseKeepAliveResponse]
	cancel context.CancelFunc

	mu      sync.Mutex // orders Send with the pending queues
	pending map[int64][]chan kaResult
	err     error // non-nil once the stream is broken
}

type kaResult struct {
	ttl int64 // seconds; <= 0 means the lease is gone
	err error
}

func newKeeper(ctx context.Context, cli *clientv3.Client, spawn func(func()) bool) *keeper {
	return &keeper{lc: pb.NewLeaseClient(cli.ActiveConnection()), ctx: ctx, spawn: spawn}
}

// renew sends one keep-alive for id and waits for etcd's answer. A broken
// stream is replaced and the request sent once more: renewing twice is
// harmless, and a request sent later than the caller measured only makes
// the caller's deadline more conservative.
func (k *keeper) renew(ctx context.Context, id int64) (int64, error) {
	var lastErr error
	for range 2 {
		s, err := k.stream(ctx)
		if err != nil {
			return 0, err
		}
		ch, err := s.send(id)
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case r := <-ch:
			if r.err != nil {
				lastErr = r.err
				continue
			}
			return r.ttl, nil
		case <-ctx.Done():
			return 0, rpcError(ctx, "lease keep-alive", ctx.Err())
		}
	}
	return 0, rpcError(ctx, "lease keep-alive", lastErr)
}

// stream returns the open stream, opening one if needed. Opening runs in
// its own goroutine bound to the Backend's lifetime, so a caller whose ctx
// ends stops waiting without tearing down a stream that others will use.
func (k *keeper) stream(ctx context.Context) (*kaStream, error) {
	k.mu.Lock()
	if s := k.cur; s != nil {
		k.mu.Unlock()
		return s, nil
	}
	if k.opening == nil {
		opening := make(chan struct{})
		if !k.spawn(func() { k.open(opening) }) {
			k.mu.Unlock()
			return nil, closedError("lease keep-alive")
		}
		k.opening = opening
	}
	opening := k.opening
	k.mu.Unlock()

	select {
	case <-opening:
	case <-ctx.Done():
		return nil, rpcError(ctx, "lease keep-alive", ctx.Err())
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur != nil {
		return k.cur, nil
	}
	if k.ctx.Err() != nil {
		return nil, closedError("lease keep-alive")
	}
	return nil, rpcError(ctx, "lease keep-alive", k.openErr)
}

func (k *keeper) open(done chan struct{}) {
	// WithRequireLeader: a member without a leader fails the stream
	// instead of holding renewals it cannot perform.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(k.ctx))
	st, err := k.lc.LeaseKeepAlive(sctx, grpc.WaitForReady(true))

	k.mu.Lock()
	defer k.mu.Unlock()
	k.opening = nil
	defer close(done)
	if err != nil {
		cancel()
		k.openErr = err
		return
	}
	s := &kaStream{stream: st, cancel: cancel, pending: make(map[int64][]chan kaResult)}
	if !k.spawn(func() { k.receive(s) }) {
		cancel()
		k.openErr = closedError("lease keep-alive")
		return
	}
	k.cur = s
}

// receive hands etcd's answers to the waiting callers until the stream
// breaks, then fails every caller still waiting on it.
func (k *keeper) receive(s *kaStream) {
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			k.mu.Lock()
			if k.cur == s {
				k.cur = nil
			}
			k.mu.Unlock()
			s.fail(err)
			return
		}
		s.deliver(resp)
	}
}

// send queues a caller for id and sends the request.
func (s *kaStream) send(id int64) (<-chan kaResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	ch := make(chan kaResult, 1)
	s.pending[id] = append(s.pending[id], ch)
	// A failed Send means the stream is broken: Recv fails as well and
	// fail() answers ch with the stream's error, so the error is not needed
	// here and the queued slot needs no undo.
	_ = s.stream.Send(&pb.LeaseKeepAliveRequest{ID: id})
	return ch, nil
}

func (s *kaStream) deliver(resp *pb.LeaseKeepAliveResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.pending[resp.ID]
	if len(q) == 0 {
		return // an answer nobody asked for on this stream; ignore it
	}
	q[0] <- kaResult{ttl: resp.TTL}
	if len(q) == 1 {
		delete(s.pending, resp.ID)
	} else {
		s.pending[resp.ID] = q[1:]
	}
}

func (s *kaStream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancel()
	if s.err == nil {
		s.err = fmt.Errorf("keep-alive stream: %w", err)
	}
	for id, q := range s.pending {
		for _, ch := range q {
			ch <- kaResult{err: s.err}
		}
		delete(s.pending, id)
	}
}
