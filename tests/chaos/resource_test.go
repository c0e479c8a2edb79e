package chaos

import (
	"sync"

	"github.com/ash-lock/ashlock/fencing"
)

// resourceName is the name the mutex workload's resource admits tokens
// under.
const resourceName = "chaos-counter"

// resource is a fenced external register - the mutex workload's resource
// (b), and each permit's register of the permits workload: a counter kept
// in this process that holders - goroutines here, and children over their pipes -
// read and write with their fencing token. It records every request itself,
// with call and return times on the run's clock, and the writes it applied
// in order.
//
// With fencing on, every read and every write is admitted by a
// fencing.Fence first, and the admission and the request are one step
// under mu, as the fencing package asks. With fencing off (the negative
// control) everything is admitted, as a resource that trusts its clients
// would.
//
// Safe for concurrent use.
type resource struct {
	clk     clock
	name    string // what the fence admits tokens under
	fencing bool
	hist    *history

	mu      sync.Mutex
	fence   fencing.Fence
	value   int64
	applied []applied
}

func newResource(clk clock, name string, fenced bool) *resource {
	return &resource{clk: clk, name: name, fencing: fenced, hist: &history{}}
}

func (r *resource) admit(token uint64) bool {
	return !r.fencing || r.fence.Admit(r.name, token) == nil
}

// read returns the counter if token is admitted.
func (r *resource) read(holder int, token uint64) (int64, bool) {
	call := r.clk.now()
	r.mu.Lock()
	ok := r.admit(token)
	v := r.value
	r.mu.Unlock()
	out := regOutput{status: statusStale}
	if ok {
		out = regOutput{status: statusOK, value: v}
	}
	r.hist.add(op{holder: holder, in: regInput{kind: opRead, token: token}, out: out, call: call, ret: r.clk.now()})
	return v, ok
}

// write sets the counter to value if token is admitted. tag names the write
// uniquely.
func (r *resource) write(holder int, token uint64, value int64, tag string) bool {
	call := r.clk.now()
	r.mu.Lock()
	ok := r.admit(token)
	if ok {
		r.value = value
		r.applied = append(r.applied, applied{value: value, tag: tag})
	}
	r.mu.Unlock()
	out := regOutput{status: statusStale}
	if ok {
		out.status = statusOK
	}
	in := regInput{kind: opWrite, token: token, value: value, tag: tag}
	r.hist.add(op{holder: holder, in: in, out: out, call: call, ret: r.clk.now()})
	return ok
}

// record returns the writes applied so far, in order.
func (r *resource) record() []applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]applied(nil), r.applied...)
}
