package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ash-lock/ashlock/backend"
)

// testMutualExclusion has many goroutines, fair and non-fair, on two
// leases, take one key in turn. While it holds the key each checks that it
// is the only holder (an atomic count) and that the store agrees (Inspect
// names its token); tokens must come out in increasing order.
func testMutualExclusion(f *fixture) {
	const (
		key     = "mutex"
		workers = 8
		rounds  = 12
	)
	leases := []backend.Lease{f.grant(holdTTL), f.grant(holdTTL)}

	var (
		holders atomic.Int32
		mu      sync.Mutex // guards problems and tokens
		tokens  []uint64
		errs    []error
	)
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	one := func(w, r int) error {
		ctx, cancel := context.WithTimeout(f.t.Context(), f.timeout)
		defer cancel()
		rq := req(key, leases[w%2], fmt.Sprintf("worker %d round %d", w, r))
		rq.Fair = (w+r)%3 != 0 // a third of the requests are non-fair
		c, err := f.b.Acquire(ctx, rq)
		if err != nil {
			return fmt.Errorf("acquire (fair=%v): %w", rq.Fair, err)
		}
		if n := holders.Add(1); n != 1 {
			report(fmt.Errorf("%s holds the key together with %d other claim(s)", rq.Owner, n-1))
		}
		mu.Lock()
		tokens = append(tokens, c.Token)
		mu.Unlock()
		// Asking the store while holding both widens the window in which
		// an overlap would show and checks that the store agrees.
		if info, err := f.b.Inspect(ctx, key); err != nil {
			report(fmt.Errorf("inspect while holding: %w", err))
		} else if !info.Held || info.Token != c.Token {
			report(fmt.Errorf("%s holds token %d but Inspect says held=%v by token %d", rq.Owner, c.Token, info.Held, info.Token))
		}
		holders.Add(-1)
		if err := f.b.Release(ctx, c); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
	f.runWorkers(workers, rounds, "acquisitions", one, report)

	var order []error
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			order = append(order, fmt.Errorf("holder %d got token %d, not above the previous holder's %d", i, tokens[i], tokens[i-1]))
		}
	}
	f.errorsCapped(errs)
	f.errorsCapped(order)
	if len(tokens) != workers*rounds && len(errs) == 0 {
		f.t.Errorf("%d acquisitions recorded, want %d", len(tokens), workers*rounds)
	}
	f.wantFree(key, "after every worker released")
}

// oddKeys are distinct keys that an escaping or prefix-scanning scheme
// could confuse: prefixes of one another, separators, escape sequences,
// spaces and non-ASCII text.
var oddKeys = []string{
	"a", "a/b", "a/", "a/b/c", "/a", "a//b",
	"orders/4", "orders/42", "orders/4/2",
	"a%2Fb", "a%2fb", "100%", "100%25",
	"with space", "with  space", " leading", "trailing ",
	"ünïcødé/鍵", "🔒", "..", ".", "a.b", "a\\b",
}

// testDistinctKeys holds every odd key at once, then checks that a waiter
// on one is seen only on that key and that releasing keys one by one
// frees exactly those.
func testDistinctKeys(f *fixture) {
	l := f.grant(holdTTL)
	claims := make(map[string]backend.Claim, len(oddKeys))
	for _, k := range oddKeys {
		c, err := f.b.Acquire(f.ctx(), try(req(k, l, "holder of "+k)))
		if errors.Is(err, backend.ErrLocked) {
			f.t.Errorf("TryAcquire %q failed while only other keys were held, so it shares a queue with one of them: %v", k, err)
			continue
		}
		if err != nil {
			f.t.Fatalf("TryAcquire %q: %v", k, err)
		}
		claims[k] = c
	}
	for k, c := range claims {
		info := f.inspect(k)
		if info.Key != k || !info.Held || info.Token != c.Token || info.Owner != "holder of "+k || len(info.Waiters) != 0 {
			f.t.Errorf("Inspect %q: key %q held=%v owner %q token %d waiters %d; want its own holder (token %d), no waiters",
				k, info.Key, info.Held, info.Owner, info.Token, len(info.Waiters), c.Token)
		}
	}

	first := oddKeys[0]
	w := f.start(req(first, l, "waiter on "+first))
	f.awaitWaiters(first, "waiter on "+first)
	for _, k := range oddKeys[1:] {
		if info := f.inspect(k); len(info.Waiters) != 0 {
			f.t.Errorf("Inspect %q lists waiters %q queued on %q", k, waiterOwners(info), first)
		}
	}
	for _, k := range oddKeys[1:] {
		if c, ok := claims[k]; ok {
			f.release(c)
			f.wantFree(k, "after its release")
		}
	}
	if c, ok := claims[first]; ok {
		f.wantHolder(first, c.Token, "after releasing every other key")
		f.stillWaiting("releasing other keys", w)
		f.release(c)
		f.release(f.got(w))
	}
	f.wantFree(first, "after its waiter released")
}
