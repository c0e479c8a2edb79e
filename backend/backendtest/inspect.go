package backendtest

// testInspect checks what Inspect reports for a never-used key, a held key
// with a waiter, and a key freed again.
func testInspect(f *fixture) {
	const key = "inspect"
	info, err := f.b.Inspect(f.ctx(), key)
	if err != nil {
		f.t.Fatalf("Inspect of a never-used key: %v, want nil", err)
	}
	if info.Key != key || info.Held || info.Owner != "" || info.Token != 0 || !info.AcquiredAt.IsZero() || len(info.Waiters) != 0 {
		f.t.Errorf("Inspect of a never-used key: %+v, want Key %q and nothing else", info, key)
	}

	l := f.grant(holdTTL)
	c := f.acquire(req(key, l, "inspector"))
	if c.AcquiredAt.IsZero() {
		f.t.Errorf("claim has a zero AcquiredAt")
	}
	w := f.start(req(key, l, "queued"))
	info = f.awaitWaiters(key, "queued")
	if info.Key != key || !info.Held || info.Owner != "inspector" || info.Token != c.Token || info.AcquiredAt.IsZero() {
		f.t.Errorf("Inspect of a held key: key %q held %v owner %q token %d acquired %v; want %q held by %q with token %d and a time",
			info.Key, info.Held, info.Owner, info.Token, info.AcquiredAt, key, "inspector", c.Token)
	}
	f.release(c)
	f.release(f.got(w))
	f.wantFree(key, "after holder and waiter released")
	if info := f.inspect(key); info.Owner != "" || info.Token != 0 || !info.AcquiredAt.IsZero() {
		f.t.Errorf("Inspect of a freed key: %+v, want no holder fields", info)
	}
}
