package etcdtest

import "go.uber.org/goleak"

// IgnoredGoroutines lists goroutines that embedded etcd servers can leave
// behind after they are closed, for goleak.VerifyTestMain in packages that
// use this one.
//
// They all belong to the HTTP transport between cluster members
// (rafthttp): after a member is stopped and restarted, a peer connection
// of its old incarnation can stay parked in net/http until the process
// exits. The entries are net/http's own connection loops, which ashlock's
// code never runs (its etcd client speaks gRPC, which has its own
// transport), so a leak of ashlock's goroutines is still reported.
func IgnoredGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
	}
}
