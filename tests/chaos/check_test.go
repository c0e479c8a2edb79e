package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// checkReadTimeout bounds the reads the checks make from the store.
const checkReadTimeout = 30 * time.Second

// leasedKeys lists the keys under prefix that are bound to a lease: the
// claims (and the control's mutex keys). The backend's stamp records have
// no lease and are meant to stay. (Not read with WithKeysOnly: etcd 3.7
// leaves the lease out of keys-only answers.)
func leasedKeys(ctx context.Context, cli *clientv3.Client, prefix string) ([]string, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 {
			out = append(out, string(kv.Key))
		}
	}
	return out, nil
}

// check runs every check of a finished run and fills res. Call it once all
// holders are stopped and their routes closed.
func (h *harness) check(t *testing.T, res *runResult, resrc *resource, regHist *history, acqs *acquisitions, from, healed int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkReadTimeout)
	defer cancel()

	// Guarantee: nothing is left behind.
	var err error
	if res.leftoverClaims, err = h.st.leftovers(ctx, lockPrefix(res.cfg)); err != nil {
		t.Errorf("%s: list the prefix: %v", res.cfg.name, err)
	}

	if res.mutexRun() {
		h.checkMutex(t, ctx, res, resrc, regHist, acqs, from, healed)
	}
	if res.cfg.permits.size() > 0 {
		res.perm = checkPermits(res.cfg.name, h.pool, h.permAcqs.snapshot(), healed)
		res.perm.holders = res.cfg.permits
	}
	if res.cfg.transfer.size() > 0 {
		res.xfer = checkTransfer(res.cfg.name, h.bank, h.xferAcqs.snapshot(), healed)
		res.xfer.holders = res.cfg.transfer
	}
	if res.cfg.election > 0 {
		seen, problems := h.obs.snapshot()
		res.elect = checkElection(res.cfg.name, h.elReg, h.elAcqs.snapshot(), seen, healed, res.cfg.prof.ttl)
		res.elect.excuseGaps(h.elAcqs.snapshot(), append(h.inj.listenerGaps(), h.obs.listenerGaps()...))
		res.elect.markHeld(h.elAcqs.snapshot(), h.inj.observerHeld())
		res.elect.candidates = res.cfg.election
		res.elect.problems = append(res.elect.problems, problems...)
	}
	for _, ho := range h.holders {
		n := ho.failedAcquires.Load()
		switch {
		case ho.wlName == wlPermits:
			res.perm.failedAcquires += n
		case ho.wlName == wlTransfer:
			res.xfer.failedAcquires += n
		default:
			res.failedAcquires += n
			res.steps += ho.steps.Load()
		}
	}
	for _, ch := range h.children {
		switch ch.workload {
		case wlMutex:
			res.steps += ch.steps.Load()
		case wlElection:
			res.elect.late += ch.late.Load()
			res.elect.lateAdmitted += ch.lateAdmitted.Load()
			res.elect.lateBeliefs += ch.lateBeliefs.Load()
		}
	}
}

// checkMutex runs the mutex workload's checks.
func (h *harness) checkMutex(t *testing.T, ctx context.Context, res *runResult, resrc *resource, regHist *history, acqs *acquisitions, from, healed int64) {
	t.Helper()
	// Workload (a): the register in the store, against the store's own
	// record.
	record, err := h.st.registerRecord(ctx, registerKey(res.cfg), from)
	if err != nil {
		t.Errorf("%s: read the register's history: %v", res.cfg.name, err)
	}
	ops, problems := resolve(regHist.snapshot(), record)
	res.problems = append(res.problems, problems...)
	if err == nil && len(record) == 0 {
		// A guard that refuses every holder passes every other check.
		res.problems = append(res.problems, "the register in the store applied no write")
	}
	res.regOps = len(ops)
	res.regCheck, res.regViz = linearizable(res.cfg.name+"-register", fencedRegister(false), ops)
	res.regLost, res.regLostAcked = lostUpdates(record, ops)

	// Workload (b): the fenced resource, against its own record.
	resRecord := resrc.record()
	ops, problems = resolve(resrc.hist.snapshot(), resRecord)
	res.problems = append(res.problems, problems...)
	res.resOps = len(ops)
	res.resCheck, res.resViz = linearizable(res.cfg.name+"-resource", fencedRegister(true), ops)
	res.resLost, res.resLostAcked = lostUpdates(resRecord, ops)

	// The strict mutex model, tokens and stamps.
	all := acqs.snapshot()
	res.acquisitions = len(all)
	for _, a := range all {
		res.doneButValid += a.doneButValid
		if a.returned > healed {
			res.afterFaults++
		}
	}
	res.overlaps = overlaps(all)
	res.lostHolds, res.closest = closestCall(all)
	res.problems = append(res.problems, revokedTooLong(all, res.cfg.prof.ttl)...)
	res.problems = append(res.problems, tokenAndStampProblems(all)...)
	if res.afterFaults == 0 {
		res.problems = append(res.problems, fmt.Sprintf("no acquisition in the %v after the faults ended", res.cfg.quiet))
	}
}
