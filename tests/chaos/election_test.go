package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// The election workload: candidates in child processes run
// Election.Run on electionName. Each call of lead reports its term to
// the parent (an "acq" message) and then, until its context ends or its
// hold (drawn like the other holders') is over, does read-modify-writes
// on the election's register - a fenced resource in the parent process,
// reached over the pipe - with the term as its token. A leader whose read
// the fence refuses knows its term is over and returns. When lead returns
// nil Run resigns and campaigns again at the back of the queue, so terms
// change without faults too. An observer in this process (observer_test.go)
// records every Leader that Election.Observe yields.
//
// While lead runs, a prober checks lead's context every childProbeEvery,
// each check timed on the parent's clock as a lock child's checks of its
// guard are (a context not ended means "I still lead"), so that every
// term gets a last moment its leader believed it led, which the checks
// hold against the next term's start.
//
// With workerConfig.Late set (a negative control) a leader whose
// context ended goes on writing with its old term for that long: exactly
// what lead's context and the term's token are there to prevent. With
// workerConfig.LateBelief set (another) a leader's probes go on reporting
// that it leads for that long after its context ended.

const (
	// electionName is the election (a lock key; it contains '/').
	electionName = "elections/scheduler"
	// electionResource names the election's register, for the fence and
	// for the children's rread/rwrite messages.
	electionResource = "elections/scheduler:register"
)

// candidateValue is the value candidate id publishes while it leads.
func candidateValue(id int) string { return fmt.Sprintf("candidate-%d", id) }

// runElection is a child candidate's loop: Run until the parent says stop.
func (w *worker) runElection(ctx context.Context) {
	el := w.lib.client.Election(w.cfg.Key).WithOwner(w.lib.owner)
	value := []byte(candidateValue(w.cfg.ID))
	for ctx.Err() == nil && !w.stuck {
		err := el.Run(ctx, value, func(lctx context.Context, term uint64) error {
			return w.lead(ctx, lctx, term)
		})
		if ctx.Err() == nil {
			// Run returns early only for lead's error (the parent is
			// gone) or a closed client: say so, and try again shortly.
			fmt.Fprintf(os.Stderr, "worker %d: Run: %v\n", w.cfg.ID, err)
			w.pause(ctx, retryPause)
		}
	}
}

// lead is the candidate's lead function for term. ctx is the worker's,
// lctx the term's. The term is probed from when the parent has been told
// of it (the parent credits probes to the child's latest "acq") until
// lead returns.
func (w *worker) lead(ctx, lctx context.Context, term uint64) error {
	if err := w.io.send(message{T: "acq", Token: term}); err != nil {
		return err
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go w.probeTerm(lctx, stop, stopped)
	err := w.leadTerm(ctx, lctx, term, stopped)
	close(stop)
	select {
	case <-stopped:
	case <-time.After(2 * callTimeout):
		// The prober's calls end within callTimeout, so this is a bug
		// here; the child's exit status tells the parent.
		w.stuck = true
		return errors.Join(err, errors.New("the term's prober did not stop"))
	}
	return err
}

// leadTerm is lead's work: steps on the register until the term or the
// hold ends, then what the negative controls add. stopped closes when the
// term's prober has stopped.
func (w *worker) leadTerm(ctx, lctx context.Context, term uint64, stopped <-chan struct{}) error {
	until := time.Now().Add(span{w.cfg.MinHold, w.cfg.MaxHold}.draw(w.rng))
	for first := true; first || time.Now().Before(until); first = false {
		if lctx.Err() != nil {
			break
		}
		refused, err := w.electionStep(lctx, term, false)
		if err != nil {
			return err
		}
		w.steps++
		if refused {
			return nil // a newer term has been at the register
		}
	}
	if lctx.Err() == nil {
		return nil
	}
	if w.cfg.Late > 0 {
		// The negative control: the term is over and this leader does
		// not care. Bounded by Late and by the worker's own end.
		lateUntil := time.Now().Add(w.cfg.Late)
		for time.Now().Before(lateUntil) && ctx.Err() == nil {
			if _, err := w.electionStep(ctx, term, true); err != nil {
				return err
			}
		}
	}
	if w.cfg.LateBelief > 0 {
		// The negative control of the probes: the leader stays in lead
		// while its prober goes on reporting belief, until the prober
		// gives up (LateBelief after it saw the context end, plus the
		// call in flight) or the worker ends.
		select {
		case <-stopped:
		case <-ctx.Done():
		case <-time.After(w.cfg.LateBelief + 2*callTimeout):
		}
	}
	return nil
}

// probeTerm is a leader's prober: like a lock child's probe, it checks
// every childProbeEvery, timed on the parent's clock, whether the leader
// still believes it leads - lctx not ended - until stop closes or a check
// fails, and once more when lctx's Done has closed (that check must
// fail). With LateBelief set (the negative control) it goes on reporting
// belief for LateBelief after its first check that found lctx ended, each
// such report marked probeLate.
func (w *worker) probeTerm(lctx context.Context, stop <-chan struct{}, stopped chan<- struct{}) {
	if late := w.cfg.LateBelief; late > 0 {
		var ended time.Time // of the prober's goroutine only
		probeLoop(nil, childProbeEvery, stop, stopped, func(bool) bool {
			ok, err := w.timedCheck(func() (bool, string) {
				if lctx.Err() == nil {
					return true, ""
				}
				if ended.IsZero() {
					ended = time.Now()
				}
				return time.Since(ended) < late, probeLate
			})
			return err == nil && ok
		})
		return
	}
	probeLoop(lctx.Done(), childProbeEvery, stop, stopped, func(bool) bool {
		ok, err := w.timedCheck(func() (bool, string) {
			doneSeen := closed(lctx.Done())
			ok := lctx.Err() == nil
			if doneSeen {
				return ok, probeAfterDone
			}
			return ok, ""
		})
		return err == nil && ok
	})
}

// electionStep is one read-modify-write on the election's register with
// the term as token. It reports whether the fence refused the read. Like
// the other workloads it does not look at its context between the read
// and the write: the write after a pause there is what fencing is for.
func (w *worker) electionStep(ctx context.Context, term uint64, late bool) (refused bool, err error) {
	r, err := w.call(message{T: "rread", Res: electionResource, Token: term})
	if err != nil || !r.OK {
		return err == nil, err
	}
	w.work(ctx)
	kind := ""
	if late {
		kind = lateWrite
	}
	_, err = w.call(message{T: "rwrite", Res: electionResource, Token: term, Value: r.Value + 1, Tag: w.nextTag(), Kind: kind})
	return false, err
}

// lateWrite marks an rwrite made after lead's context ended (Kind).
const lateWrite = "late"

// probeLate marks a "probed" message of the LateBelief control's prober
// whose check found lead's context ended (Kind); with ok, a belief
// reported late.
const probeLate = "late"
