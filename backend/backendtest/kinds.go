package backendtest

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Request builders and Inspect checks for the kinds of claim of the queue
// model: shared, counted and multi-key.

// shared returns r as a shared request.
func shared(r backend.AcquireRequest) backend.AcquireRequest { r.Shared = true; return r }

// counted returns r as a request for one of n permits.
func counted(r backend.AcquireRequest, n int) backend.AcquireRequest { r.Permits = n; return r }

// valued returns r publishing v.
func valued(r backend.AcquireRequest, v string) backend.AcquireRequest { r.Value = []byte(v); return r }

// lostTo returns r reporting its loss to rec.
func lostTo(r backend.AcquireRequest, rec *lostRecorder) backend.AcquireRequest {
	r.OnLost = backend.LossFunc(rec.onLost)
	return r
}

// multi builds a fair, waiting request for every key of keys at once. Keys
// are sorted (the contract asks callers to), so requests listing
// overlapping sets in different orders reach the backend alike.
func multi(l backend.Lease, owner string, keys ...string) backend.AcquireRequest {
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	r := req(ks[0], l, owner)
	r.Keys = ks
	return r
}

// heldAt names a claim at one of its keys.
type heldAt struct {
	key   string
	token uint64
}

// named records owner as the name of c at each of its keys.
func (f *fixture) named(owner string, c backend.Claim) {
	for _, k := range c.AllKeys() {
		f.owners[heldAt{k, c.Token}] = owner
	}
}

// ownerOf returns the owner recorded for c at key.
func (f *fixture) ownerOf(key string, c backend.Claim) string {
	return f.owners[heldAt{key, c.Token}]
}

func holderOwners(info backend.LockInfo) []string {
	owners := make([]string, 0, len(info.Holders))
	for _, h := range info.Holders {
		owners = append(owners, h.Owner)
	}
	return owners
}

// describeHolders renders info's holders for a message.
func describeHolders(info backend.LockInfo) string {
	var b strings.Builder
	b.WriteString("[")
	for i, h := range info.Holders {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s:token %d permit %d shared %v value %q", h.Owner, h.Token, h.Permit, h.Shared, h.Value)
	}
	b.WriteString("]")
	return b.String()
}

// wantHolders reports an error unless key is held by exactly the claims
// want, oldest first, each listed with its owner, token, permit, kind and
// value, and unless Owner, Token and AcquiredAt are the oldest holder's and
// Permits is the holders' permit count. It returns the LockInfo.
func (f *fixture) wantHolders(key, context string, want ...backend.Claim) backend.LockInfo {
	f.t.Helper()
	info := f.inspect(key)
	if len(want) == 0 {
		if info.Held || len(info.Holders) > 0 {
			f.t.Errorf("%s: Inspect %q: Held %v, holders %s; want no holder", context, key, info.Held, describeHolders(info))
		}
		return info
	}
	match := len(info.Holders) == len(want)
	for i := 0; match && i < len(want); i++ {
		h, c := info.Holders[i], want[i]
		match = h.Token == c.Token && h.Owner == f.ownerOf(key, c) && h.Permit == c.Permit &&
			h.Shared == c.Shared && bytes.Equal(h.Value, c.Value) && !h.AcquiredAt.IsZero()
	}
	if !match {
		var w strings.Builder
		for i, c := range want {
			if i > 0 {
				w.WriteString(" ")
			}
			fmt.Fprintf(&w, "%s:token %d permit %d shared %v value %q", f.ownerOf(key, c), c.Token, c.Permit, c.Shared, c.Value)
		}
		f.t.Errorf("%s: Inspect %q: holders %s, want [%s] oldest first, each with a time", context, key, describeHolders(info), w.String())
	}
	oldest := want[0]
	if !info.Held || info.Owner != f.ownerOf(key, oldest) || info.Token != oldest.Token ||
		(len(info.Holders) > 0 && !info.AcquiredAt.Equal(info.Holders[0].AcquiredAt)) {
		f.t.Errorf("%s: Inspect %q: Held %v owner %q token %d, want the oldest holder's: held by %q token %d (and its AcquiredAt)",
			context, key, info.Held, info.Owner, info.Token, f.ownerOf(key, oldest), oldest.Token)
	}
	if info.Permits != oldest.Permits {
		f.t.Errorf("%s: Inspect %q: Permits %d, want the holders' %d", context, key, info.Permits, oldest.Permits)
	}
	return info
}

// awaitQueued polls Inspect until every owner in want is among key's
// waiters, in that order, and returns the LockInfo. Unlike awaitWaiters it
// allows other waiters: a multi-key claim that does not yet hold all its
// keys may be listed at the keys it is first in line for, as a holder or as
// a waiter. A timeout is fatal.
func (f *fixture) awaitQueued(key string, want ...string) backend.LockInfo {
	f.t.Helper()
	deadline := time.Now().Add(f.timeout)
	for {
		info := f.inspect(key)
		got := waiterOwners(info)
		if containsAll(got, want) {
			var order []string
			for _, o := range got {
				if slices.Contains(want, o) {
					order = append(order, o)
				}
			}
			if !slices.Equal(order, want) {
				f.t.Errorf("Inspect %q: waiters %q, want %q among them in request order", key, got, want)
			}
			return info
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("Inspect %q: waiters %q after %v, want %q to be queued", key, got, f.timeout, want)
		}
		time.Sleep(pollEvery)
	}
}

// wantWaiterKinds reports an error unless key's waiters are owners with
// the given Shared flags, in order.
func (f *fixture) wantWaiterKinds(info backend.LockInfo, owners []string, sharedFlags []bool) {
	f.t.Helper()
	var got, want []string
	for _, w := range info.Waiters {
		got = append(got, fmt.Sprintf("%s(shared=%v)", w.Owner, w.Shared))
	}
	for i, o := range owners {
		want = append(want, fmt.Sprintf("%s(shared=%v)", o, sharedFlags[i]))
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("Inspect %q: waiters %q, want %q", info.Key, got, want)
	}
}

// fails waits for a background Acquire to fail and returns its error; a
// success is reported and its claim released.
func (f *fixture) fails(p *pending, context string) error {
	f.t.Helper()
	c, err := f.wait(p, f.timeout)
	if err == nil {
		f.t.Errorf("%s: Acquire by %s succeeded (token %d), want it to fail", context, p.owner, c.Token)
		f.release(c)
	}
	return err
}

// releaseAll releases every claim of cs.
func (f *fixture) releaseAll(cs ...backend.Claim) {
	f.t.Helper()
	for _, c := range cs {
		f.release(c)
	}
}
