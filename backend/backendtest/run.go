// Package backendtest is a conformance suite for implementations of
// backend.Backend. Every backend ashlock ships runs it, and so should any
// backend written elsewhere:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backend.Backend {
//			return mybackend.New(...)
//		})
//	}
//
// Each guarantee of the backend contract is checked in a subtest named after
// it, against a fresh backend, so a failure names what is broken. Checks
// gather every problem they see rather than stopping at the first, where
// going on still makes sense.
//
// The suite is written for stores that are slow and coarse: every wait is
// bounded by a timeout (10s by default), leases are requested long enough
// never to run out during a subtest, lease loss is produced with Revoke, and
// only the subtest UnrenewedLeaseExpires waits out a TTL, the shortest one
// the backend grants. Against an in-process backend the whole suite takes a
// few seconds. A backend that implements backend.ClaimNamer gets every
// request without an ID, as the client sends them.
//
// The environment variable ASHLOCK_BACKENDTEST_TIMEOUT (a time.Duration
// such as "30s") changes the timeout, for slow CI machines.
package backendtest

import (
	"os"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// TimeoutEnv names the environment variable that overrides the suite's
// timeout on every wait.
const TimeoutEnv = "ASHLOCK_BACKENDTEST_TIMEOUT"

// DefaultTimeout bounds every wait of the suite unless TimeoutEnv says
// otherwise: how long an Acquire may take to return after the key became
// free, how long OnLost may take after a Revoke, and so on.
const DefaultTimeout = 10 * time.Second

// Run checks the backends that newBackend returns against the contract of
// backend.Backend, in one subtest per guarantee. newBackend is called once
// per subtest, with the subtest's t, and must return a fresh, open backend
// with no claims; Run closes it in a t.Cleanup registered right after
// newBackend returns, so cleanups newBackend registers itself (stopping a
// server, say) run after that Close. Failures are reported through t;
// Run returns when every subtest has finished and left no goroutine of its
// own behind.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend) {
	t.Helper()
	timeout := DefaultTimeout
	if s := os.Getenv(TimeoutEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("backendtest: %s=%q is not a positive duration", TimeoutEnv, s)
		}
		timeout = d
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			c.run(newFixture(t, newBackend, timeout))
		})
	}
}

// checks is the suite: one entry per guarantee, named after it.
var checks = []struct {
	name string
	run  func(f *fixture)
}{
	{"MutualExclusion", testMutualExclusion},
	{"DistinctKeysAreIndependent", testDistinctKeys},
	{"TokensStrictlyIncrease", testTokensIncrease},
	{"ReleaseComparesIdentity", testReleaseIdentity},
	{"FairWaitersAreFIFO", testFairFIFO},
	{"NonFairYieldsToQueuedFair", testNonFairYields},
	{"CancelledWaitLeavesNothing", testCancelledWait},
	{"TryAcquireLeavesNothing", testTryAcquire},
	{"InspectReportsState", testInspect},
	{"LeasesGrantAndRenew", testGrantRenew},
	{"RevokeSignalsLoss", testRevokeSignalsLoss},
	{"ReleasedClaimIsNotLost", testReleasedNotLost},
	{"UnrenewedLeaseExpires", testLeaseExpires},
	{"StampsChainAcrossHolders", testStamps},
	{"CloseEndsEverything", testClose},
	// The queue model's kinds of claim: shared, counted, multi-key.
	{"SharedClaimsHoldTogether", testSharedHoldTogether},
	{"ReadersDoNotStarveWriters", testReadersDoNotStarveWriters},
	{"WriterReleaseAdmitsReaderRun", testWriterAdmitsReaderRun},
	{"SharedTryAcquire", testSharedTryAcquire},
	{"PermitsLowestFreeFirst", testPermitsLowestFree},
	{"PermitsExcludeAndFence", testPermitsExcludeAndFence},
	{"PermitMismatchLeavesNothing", testPermitMismatch},
	{"MultiKeyHoldsEveryKey", testMultiKeyHoldsAll},
	{"MultiKeyWaitsForEveryKey", testMultiKeyWaitsForEveryKey},
	{"MultiKeyNeverDeadlocks", testMultiKeyNoDeadlock},
	{"MultiKeyTryAcquireLeavesNothing", testMultiKeyTryAcquire},
	{"SharedMultiKey", testSharedMultiKey},
	{"ValuesPublishedAndSet", testValues},
	{"SetValueComparesIdentity", testSetValueComparesIdentity},
	{"InspectReportsHolders", testInspectHolders},
	{"CancelledWaitOfEveryKindLeavesNothing", testCancelledWaitOfEveryKind},
	{"ReleaseOfEveryKindComparesIdentity", testReleaseOfEveryKindComparesIdentity},
	{"RevokeSignalsLossOfEveryKind", testRevokeSignalsLossOfEveryKind},
	{"ObserveReportsHolderChanges", testObserve}, // backend.Observer only
}
