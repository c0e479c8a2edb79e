package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

type faultKind int

const (
	faultLeaderKill faultKind = iota // stop the leader, restart it later
	faultPartition                   // cut one member off from its peers
	faultBlackhole                   // drop all traffic between one holder and etcd
	faultDelay                       // delay all traffic between one holder and etcd
	faultRevoke                      // revoke a child holder's lease
	faultFreeze                      // SIGSTOP a child holder for longer than its TTL
	// The faults of a store that is one server (PostgreSQL, Redis). (Kinds
	// are only ever added at the end, so that a seed keeps drawing the
	// schedule it always drew.)
	faultServerRestart // immediate shutdown of the server, started again later
	faultServerPause   // SIGSTOP every server process, SIGCONT later
	faultTerminate     // pg_terminate_backend of one holder's connections
	faultClientKill    // Redis: CLIENT KILL of one holder's connections
	numFaultKinds
)

var faultNames = [numFaultKinds]string{
	"leader-kill", "member-partition", "client-blackhole", "client-delay", "lease-revoke", "sigstop",
	"server-restart", "server-sigstop", "pg-terminate", "client-kill",
}

func (k faultKind) String() string { return faultNames[k] }

// clusterFault reports whether k acts on the store's servers (the etcd
// members, the PostgreSQL or Redis server); those are injected one at a time, so
// that an etcd quorum always remains.
func (k faultKind) clusterFault() bool {
	return k == faultLeaderKill || k == faultPartition || k == faultServerRestart || k == faultServerPause
}

// fault is one scheduled fault. The schedule fixes when, what kind, for how
// long and how the target is chosen; which holder is the target depends on
// who holds the lock at that moment, which no seed can fix.
type fault struct {
	at      time.Duration // from the start of the fault period
	kind    faultKind
	hold    time.Duration // how long the fault lasts; 0 for a revocation
	latency time.Duration // faultDelay: added each way
	current bool          // aim at the current lock holder when it is a candidate
	pick    uint64        // otherwise, candidates[pick % len(candidates)]
}

func (f fault) String() string {
	s := fmt.Sprintf("%7.2fs %-16s", f.at.Seconds(), f.kind)
	if f.hold > 0 {
		s += fmt.Sprintf(" for %.2fs", f.hold.Seconds())
	}
	if f.latency > 0 {
		s += fmt.Sprintf(" latency %v", f.latency)
	}
	if f.current {
		s += " (current holder)"
	}
	return s
}

// profile says which faults a schedule draws and how.
type profile struct {
	kinds []faultKind
	ttl   time.Duration
	// targeted aims every client fault at the current lock holder and
	// makes every blackhole outlast the TTL: the negative controls use it
	// so that each fault has a chance to bite.
	targeted bool
}

// schedule draws two fault streams from seed for a period: cluster faults
// (one at a time) and client faults (one at a time), which run side by
// side. The same seed and profile always give the same schedule.
func schedule(seed uint64, period time.Duration, p profile) (clusterFaults, clientFaults []fault) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var clusterKinds, clientKinds []faultKind
	for _, k := range p.kinds {
		if k.clusterFault() {
			clusterKinds = append(clusterKinds, k)
		} else {
			clientKinds = append(clientKinds, k)
		}
	}
	clusterFaults = stream(rng, period, clusterKinds, p)
	clientFaults = stream(rng, period, clientKinds, p)
	return clusterFaults, clientFaults
}

func stream(rng *rand.Rand, period time.Duration, kinds []faultKind, p profile) []fault {
	if len(kinds) == 0 {
		return nil
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	var out []fault
	// Kinds come in rounds, each round a fresh shuffle of all of them, so
	// that every kind is injected about equally often.
	var round []faultKind
	at := between(500*time.Millisecond, 2*time.Second)
	for at < period {
		if len(round) == 0 {
			round = slices.Clone(kinds)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		f := fault{at: at, kind: round[0], pick: rng.Uint64()}
		round = round[1:]
		switch f.kind {
		case faultLeaderKill:
			f.hold = between(time.Second, 4*time.Second)
		case faultPartition:
			// Long enough for the isolated member to lose or miss an election.
			f.hold = between(2*time.Second, 5*time.Second)
		case faultBlackhole:
			f.current = p.targeted || rng.IntN(2) == 0
			if p.targeted {
				f.hold = between(p.ttl+time.Second, p.ttl+2500*time.Millisecond)
			} else {
				// Shorter than the TTL (renewals resume in time) or longer.
				f.hold = between(500*time.Millisecond, p.ttl+2500*time.Millisecond)
			}
		case faultDelay:
			f.current = p.targeted || rng.IntN(2) == 0
			f.hold = between(time.Second, 4*time.Second)
			f.latency = between(100*time.Millisecond, 1200*time.Millisecond)
		case faultRevoke:
			f.current = p.targeted || rng.IntN(10) < 7
		case faultFreeze:
			f.current = p.targeted || rng.IntN(10) < 7
			f.hold = between(p.ttl+500*time.Millisecond, p.ttl+2*time.Second)
		case faultServerRestart:
			f.hold = between(time.Second, 4*time.Second)
		case faultServerPause:
			// Shorter than the TTL (renewals resume in time) or longer.
			f.hold = between(500*time.Millisecond, p.ttl+2500*time.Millisecond)
		case faultTerminate, faultClientKill:
			f.current = p.targeted || rng.IntN(2) == 0
		}
		out = append(out, f)
		at += f.hold + between(500*time.Millisecond, 2*time.Second)
		if f.kind == faultServerRestart || f.kind == faultServerPause {
			// PostgreSQL and Redis are one server: each of its faults stops
			// every holder, so the lock gets a few seconds between them. (Drawn
			// only for these kinds: etcd's schedules stay as they were.)
			at += between(4*time.Second, 8*time.Second)
		}
	}
	return out
}
