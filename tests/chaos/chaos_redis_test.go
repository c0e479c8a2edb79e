package chaos

import (
	"os"
	"testing"
	"time"
)

// redisFaults are the faults of a run on Redis: the server's (SIGKILL and
// a restart from its append-only file, SIGSTOP), CLIENT KILL of one
// holder's connections, a blackhole between one holder and the server, an
// operator's DEL of a child's lease key, and SIGSTOP of a child holder.
var redisFaults = []faultKind{faultServerRestart, faultServerPause, faultBlackhole, faultClientKill, faultRevoke, faultFreeze}

// redisFaultFor is TestChaosRedis's fault period without soakEnv, as
// TestChaosPostgres's.
const redisFaultFor = 40 * time.Second

// TestChaosRedis is TestChaos on Redis: the same four workloads, holders
// and checks, with the mutex workload's register kept in a Redis key and
// written only by a script that checks the holder's claim first, under
// Redis's faults (redisFaults) for 40 s (or $ASHLOCK_SOAK). The observer
// is held to etcd's check: every term that led must be yielded, in order,
// unless it began and ended while the observer's subscriber was cut off
// (a restart, or a CLIENT KILL of the observer's connections) or inside a
// gap its Backend reported (redis.WithSubscriberGapHook).
func TestChaosRedis(t *testing.T) {
	faultFor := redisFaultFor
	if os.Getenv(soakEnv) != "" {
		faultFor = faultPeriod(t)
	}
	res := run(t, runConfig{
		name: "chaos-redis", store: storeRedis, seed: baseSeed(t) + 40, faultFor: faultFor, quiet: 6 * time.Second,
		inProc: 3, children: 3, fencing: true, hold: span{0, 1500 * time.Millisecond},
		prof:     profile{kinds: redisFaults, ttl: ttl},
		permits:  group{inProc: 4, children: 1},
		transfer: group{inProc: 2, children: 1}, accounts: 6,
		election: 3,
	})
	requireClean(t, res)
	if n := len(res.elect.missed); n > 0 {
		t.Errorf("Redis's Observe left out %d terms that led, outside any gap of its subscriber (%d more inside one); "+
			"DESIGN asks it for each change: seed %d, replay with -seed %d", n, len(res.elect.missedInGap), res.cfg.seed, res.cfg.seed-40)
	}
	for _, k := range redisFaults {
		if injected(res, k) == 0 {
			t.Errorf("no %v fault was injected: %v", k, res.faults)
		}
	}
	verifyNoLeaks(t)
}

// TestChaosRedisFencingOffIsCaught is TestChaosFencingOffIsCaught on
// Redis: the resource's fence off, the children's register scripts
// without the claim check, and child holders frozen between a read and
// its write. Porcupine must find both histories Illegal and the
// lost-update check must find late writes in both records; the checks
// that do not depend on the fences must pass.
func TestChaosRedisFencingOffIsCaught(t *testing.T) {
	res := run(t, runConfig{
		name: "redis-fencing-off", store: storeRedis, seed: baseSeed(t) + 41, faultFor: 20 * time.Second, quiet: 3 * time.Second,
		inProc: 1, children: 2, fencing: false, unguarded: true, hold: span{0, time.Second},
		prof: profile{kinds: []faultKind{faultFreeze}, ttl: ttl, targeted: true},
	})
	requireFencingOffCaught(t, res, "the Redis key's log")
	verifyNoLeaks(t)
}
