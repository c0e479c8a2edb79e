package chaos

import (
	"context"
	"math/rand/v2"
)

// Workload names, as holderSpec and workerConfig carry them.
const (
	wlMutex    = ""
	wlPermits  = "permits"
	wlTransfer = "transfer"
	wlElection = "election" // children only: see election_test.go
)

// A workload is what a holder does with a lock: which lock it takes each
// time and what one step under it is. The holders of a run share the
// cluster, the fault schedule and the clock whatever their workload, so a
// fault aimed at "the current holder" may hit any of them; each workload
// keeps its own histories and is checked on its own.
type workload interface {
	// acquire takes the workload's lock for one hold. rng is the holder's
	// (owned by its goroutine), so a seed replays the holders' choices.
	acquire(ctx context.Context, lk locker, rng *rand.Rand) (held, error)
	// step is one unit of work under the lock by a holder in this process.
	step(ctx context.Context, h *holder, hd held)
}

// mutexWorkload is the suite's first workload: one key, and under it a
// read-modify-write on the register in etcd (a) and one on the fenced
// resource (b).
type mutexWorkload struct{}

func (mutexWorkload) acquire(ctx context.Context, lk locker, _ *rand.Rand) (held, error) {
	return lk.acquire(ctx)
}

func (mutexWorkload) step(ctx context.Context, h *holder, hd held) {
	h.registerStep(ctx, hd)
	h.resourceStep(ctx, h.res, hd.token())
}
