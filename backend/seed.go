package backend

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// SeedOpener opens the Backend a cluster seed names (a URL whose scheme was
// registered with RegisterSeed). closeAll closes the Backend and whatever
// the opener created for it (connections, pools); the root package calls
// it from LockClient.Close. An opener may block until ctx ends.
type SeedOpener func(ctx context.Context, seed string) (b Backend, closeAll func() error, err error)

var seeds = struct {
	sync.RWMutex
	m map[string]SeedOpener
}{m: make(map[string]SeedOpener)}

// RegisterSeed makes seeds with the given scheme ("postgres" for
// "postgres://...") open through open. A package that serves a store calls
// it from its init function, as database/sql drivers register themselves.
// It panics if the scheme is empty, already registered or built in
// ("memory", "etcd"), or open is nil: those are programmer errors.
func RegisterSeed(scheme string, open SeedOpener) {
	if scheme == "" || open == nil || scheme == "memory" || scheme == "etcd" {
		panic(fmt.Sprintf("backend: RegisterSeed(%q): empty, built-in or nil", scheme))
	}
	seeds.Lock()
	defer seeds.Unlock()
	if _, dup := seeds.m[scheme]; dup {
		panic(fmt.Sprintf("backend: RegisterSeed(%q) called twice", scheme))
	}
	seeds.m[scheme] = open
}

// LookupSeed returns the opener registered for seed's scheme (the part
// before "://"), or false when none is.
func LookupSeed(seed string) (SeedOpener, bool) {
	scheme, _, ok := strings.Cut(seed, "://")
	if !ok {
		return nil, false
	}
	seeds.RLock()
	defer seeds.RUnlock()
	open, ok := seeds.m[scheme]
	return open, ok
}
