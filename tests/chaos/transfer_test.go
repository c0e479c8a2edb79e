package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/ash-lock/ashlock/fencing"
)

// The transfer workload: a bank of accounts, each a fenced register with
// an opening balance. A holder picks two or three accounts in a random
// order, takes them all with LockAll, reads their balances, moves an
// amount from one to another and writes the balances back, fenced by the
// one token at every account. Moving money never changes the total, so a
// total that changed is a lost update; and since callers list the
// accounts in any order, a LockAll that could deadlock would stop the
// transfers, which the checks require in every phase of the run.

const (
	accountPrefix  = "accounts/"
	openingBalance = 100
	maxAmount      = 25
)

// accountKeys names k accounts; the names are the lock keys and the
// resources the bank's fence admits tokens under.
func accountKeys(k int) []string {
	keys := make([]string, k)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", accountPrefix, i)
	}
	return keys
}

// pickAccounts draws the accounts of one transfer: two or three distinct
// ones, in a random order (LockAll must not care).
func pickAccounts(rng *rand.Rand, accounts []string) []string {
	n := min(2+rng.IntN(2), len(accounts))
	out := make([]string, 0, n)
	for _, i := range rng.Perm(len(accounts))[:n] {
		out = append(out, accounts[i])
	}
	return out
}

// moveMoney returns the balances after moving up to maxAmount from one of
// them to another (never below zero). The others are written back as read.
func moveMoney(rng *rand.Rand, balances []int64) []int64 {
	next := slices.Clone(balances)
	if len(next) < 2 {
		return next
	}
	from := rng.IntN(len(next))
	to := (from + 1 + rng.IntN(len(next)-1)) % len(next)
	amount := min(1+rng.Int64N(maxAmount), next[from])
	next[from] -= amount
	next[to] += amount
	return next
}

// xferOp is one request to the bank: a read of some accounts' balances or
// a write of new balances, with the token of the LockAll guard.
type xferOp struct {
	holder    int
	token     uint64
	write     bool
	keys      []string
	values    []int64 // read: the balances returned; write: the balances asked for
	ok        bool    // admitted (and, for a write, applied)
	tag       string  // writes
	call, ret int64
}

// bank is the transfer workload's resource, in this process: holders here
// call it directly, children over their pipes. A request names several
// accounts and is admitted only if every account's fence admits its token
// - checked for all of them first, then admitted at each, as one step
// under mu - so that a request refused at one account changes nothing
// anywhere, the way one transaction over the accounts would. With fencing
// off (the negative control) everything is admitted.
//
// Every applied write is a checkpoint: the bank checks that it left the
// total as it found it. Safe for concurrent use.
type bank struct {
	clk     clock
	fencing bool
	keys    []string
	total   int64

	mu        sync.Mutex
	fence     fencing.Fence
	balance   map[string]int64
	hist      []xferOp
	appliedAt []int64  // when each applied write was applied
	broken    []string // writes that changed the total
}

func newBank(clk clock, accounts int, fenced bool) *bank {
	b := &bank{clk: clk, fencing: fenced, keys: accountKeys(accounts), balance: make(map[string]int64)}
	for _, k := range b.keys {
		b.balance[k] = openingBalance
		b.total += openingBalance
	}
	return b
}

// admitAll admits token at every one of keys, or at none. Call with mu held.
func (b *bank) admitAll(token uint64, keys []string) bool {
	if !b.fencing {
		return true
	}
	for _, k := range keys {
		if _, ok := b.balance[k]; !ok || !fencing.ValidateWrite(token, b.fence.Highest(k)) {
			return false
		}
	}
	for _, k := range keys {
		if b.fence.Admit(k, token) != nil {
			// Cannot happen: the marks only move under mu, just checked.
			return false
		}
	}
	return true
}

// read returns the balances of keys if token is admitted at all of them.
func (b *bank) read(holder int, token uint64, keys []string) ([]int64, bool) {
	call := b.clk.now()
	b.mu.Lock()
	ok := b.admitAll(token, keys)
	var vs []int64
	if ok {
		for _, k := range keys {
			vs = append(vs, b.balance[k])
		}
	}
	b.hist = append(b.hist, xferOp{holder: holder, token: token, keys: slices.Clone(keys), values: vs, ok: ok, call: call, ret: b.clk.now()})
	b.mu.Unlock()
	return vs, ok
}

// write sets the balances of keys to values if token is admitted at all of
// them, and then checks the total.
func (b *bank) write(holder int, token uint64, keys []string, values []int64, tag string) bool {
	call := b.clk.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	ok := len(keys) == len(values) && b.admitAll(token, keys)
	if ok {
		before := b.sum()
		for i, k := range keys {
			b.balance[k] = values[i]
		}
		b.appliedAt = append(b.appliedAt, b.clk.now())
		// Blame the write that changed the total, not every one after it.
		if after := b.sum(); after != before {
			b.broken = append(b.broken, fmt.Sprintf("write %s by holder %d (token %d) changed the total from %d to %d",
				tag, holder, token, before, after))
		}
	}
	b.hist = append(b.hist, xferOp{holder: holder, token: token, write: true, keys: slices.Clone(keys), values: slices.Clone(values),
		ok: ok, tag: tag, call: call, ret: b.clk.now()})
	return ok
}

// sum is the total over all accounts. Call with mu held.
func (b *bank) sum() int64 {
	var s int64
	for _, v := range b.balance {
		s += v
	}
	return s
}

// transferWorkload: each hold is a LockAll on accounts picked afresh.
type transferWorkload struct{ bank *bank }

func (w transferWorkload) acquire(ctx context.Context, lk locker, rng *rand.Rand) (held, error) {
	l, ok := lk.(*libLocker)
	if !ok {
		return nil, errNotLib
	}
	return l.acquireAll(ctx, pickAccounts(rng, w.bank.keys))
}

// step is one transfer among the guard's accounts: read, work, write. Like
// the other workloads it does not re-check the guard between the read and
// the write: a pause there is what the fences are for.
func (w transferWorkload) step(ctx context.Context, h *holder, hd held) {
	keys, tok := hd.keys(), hd.token()
	bal, ok := w.bank.read(h.id, tok, keys)
	if !ok {
		return
	}
	h.work(ctx)
	w.bank.write(h.id, tok, keys, moveMoney(h.rng, bal), h.nextTag())
}

// errNotLib is returned by workloads that need an ashlock locker.
var errNotLib = errors.New("chaos: this workload needs an ashlock locker")
