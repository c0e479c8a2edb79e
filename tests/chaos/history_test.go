package chaos

import (
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// clock reads this process's monotonic clock as nanoseconds since the start
// of a run. Every time in a history comes from one clock, so that call and
// return times of different holders - in this process or, relayed, in
// children - can be compared.
type clock struct{ start time.Time }

func newClock() clock { return clock{start: time.Now()} }

func (c clock) now() int64 { return int64(time.Since(c.start)) }

// never is the return time of an operation whose effect is known but whose
// return was not observed: it may have returned at any time after its call.
const never = math.MaxInt64

type opKind uint8

const (
	opRead opKind = iota + 1
	opWrite
)

func (k opKind) String() string {
	if k == opRead {
		return "read"
	}
	return "write"
}

// status is the outcome of one operation on a register.
type status uint8

const (
	// statusOK: the operation took effect (a read returned a value).
	statusOK status = iota + 1
	// statusStale: refused - the fence saw a higher token, or the etcd
	// Txn's ownership comparison failed. It had no effect.
	statusStale
	// statusUnknown: no answer (timeout, broken connection). Reads with
	// this status are dropped from the history; writes are resolved from
	// the store's own record before checking.
	statusUnknown
)

func (s status) String() string {
	switch s {
	case statusOK:
		return "ok"
	case statusStale:
		return "stale"
	}
	return "unknown"
}

// regInput is an operation on a register, made under a lock with token.
type regInput struct {
	kind  opKind
	token uint64
	value int64  // for writes
	tag   string // for writes: unique, to find the write in the store's record
}

// regOutput is what the operation returned.
type regOutput struct {
	status status
	value  int64 // for successful reads
}

// op is one recorded operation.
type op struct {
	holder int
	in     regInput
	out    regOutput
	call   int64
	ret    int64
}

// history collects the operations on one register. Safe for concurrent use.
type history struct {
	mu  sync.Mutex
	ops []op
}

func (h *history) add(o op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *history) snapshot() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]op(nil), h.ops...)
}

// operations converts ops to porcupine's form.
func operations(ops []op) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		out = append(out, porcupine.Operation{
			ClientId: o.holder,
			Input:    o.in,
			Call:     o.call,
			Output:   o.out,
			Return:   o.ret,
		})
	}
	return out
}

// acquisition is one successful Acquire: who, with what token and stamp,
// and when it returned. believed is the time of the last check that found
// the guard valid (FencingToken succeeded, or the etcd session was not
// done): read before the check by holders in this process, taken by the
// parent before it let the check go ahead for children. For an election
// term it is the last probe that found lead's context alive, timed the
// same way, and returned is when the parent heard that lead was called.
type acquisition struct {
	holder   int
	token    uint64
	returned int64 // upper bound: read after Acquire returned (children: when the parent heard of it)
	believed int64 // lower bound on the last moment the holder believed it held the lock; 0 if unknown
	probed   bool  // believed is meaningful
	stampW   int64
	stampL   uint32
	hasStamp bool
	// lost: the holder saw its lock go (a check failed) while it held it;
	// for an election term, a probe found lead's context ended while lead
	// ran.
	lost bool
	// doneButValid counts checks that found FencingToken succeeding after
	// Done had been seen closed: a broken guard.
	doneButValid int
	// permit is the guard's permit (counted locks; 0 otherwise), keys the
	// keys it holds (LockAll; nil otherwise).
	permit int
	keys   []string
	// revoked is when the revocation of the claim's lease returned, if
	// an administrator revoked it (a fault); 0 otherwise. The holder can
	// only learn of a revocation afterwards, so such a guard is judged by
	// its local deadline instead of the strict mutex model.
	revoked int64
	// called is when Acquire was called (for a child, when the parent let
	// it call); 0 if unknown (election terms). A guard that returned
	// before another's Acquire was even called was surely issued first.
	called int64
}

// acquisitions collects acquisitions. Safe for concurrent use.
type acquisitions struct {
	mu   sync.Mutex
	list []*acquisition
}

func (a *acquisitions) add(x *acquisition) {
	a.mu.Lock()
	a.list = append(a.list, x)
	a.mu.Unlock()
}

// update runs f on x under the collection's lock.
func (a *acquisitions) update(x *acquisition, f func(*acquisition)) {
	a.mu.Lock()
	f(x)
	a.mu.Unlock()
}

// markRevoked sets the revocation time of every acquisition whose token
// is in at.
func (a *acquisitions) markRevoked(at map[uint64]int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, x := range a.list {
		if r, ok := at[x.token]; ok {
			x.revoked = r
		}
	}
}

func (a *acquisitions) snapshot() []acquisition {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]acquisition, len(a.list))
	for i, x := range a.list {
		out[i] = *x
	}
	return out
}
