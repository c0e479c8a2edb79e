package backendtest

// testInspectHolders checks Inspect's Holders: every holder of a counted
// and of a shared key, oldest first, with its permit, kind and value; the
// key's Owner, Token and AcquiredAt are the oldest holder's, and waiters
// say whether they are shared.
func testInspectHolders(f *fixture) {
	const key, n = "holders/counted", 3
	l := f.grant(holdTTL)
	a := f.acquire(valued(counted(req(key, l, "A"), n), "a"))
	b := f.acquire(valued(counted(req(key, l, "B"), n), "b"))
	c := f.acquire(counted(req(key, l, "C"), n))
	f.wantHolders(key, "three holders", a, b, c)
	f.release(a)
	f.wantHolders(key, "the oldest holder released", b, c)
	// D takes A's permit 0 but is the newest holder: oldest first is not
	// permit order.
	d := f.acquire(valued(counted(req(key, l, "D"), n), "d"))
	if d.Permit != a.Permit {
		f.t.Errorf("D got permit %d, want the only free one, %d", d.Permit, a.Permit)
	}
	f.wantHolders(key, "D took permit 0", b, c, d)
	f.releaseAll(b, c, d)
	f.wantFree(key, "every counted holder released")

	const sk = "holders/shared"
	r1 := f.acquire(valued(shared(req(sk, l, "R1")), "r1"))
	r2 := f.acquire(shared(req(sk, l, "R2")))
	x := f.start(req(sk, l, "X"))
	f.awaitWaiters(sk, "X")
	r3 := f.start(shared(req(sk, l, "R3")))
	info := f.awaitWaiters(sk, "X", "R3")
	f.wantWaiterKinds(info, []string{"X", "R3"}, []bool{false, true})
	f.wantHolders(sk, "two shared holders, a writer and a reader waiting", r1, r2)
	f.release(r1)
	f.wantHolders(sk, "the oldest shared holder released", r2)
	f.release(r2)
	xc := f.got(x)
	f.wantHolders(sk, "X woken", xc)
	f.release(xc)
	f.release(f.got(r3))
	f.wantFree(sk, "everyone released")
}
