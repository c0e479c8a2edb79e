package etcdtest

import "go.uber.org/goleak"

// IgnoredGoroutines lists goroutines that an embedded etcd server leaves
// running after it is closed, for goleak.VerifyTestMain and
// goleak.VerifyNone in packages that use this one. Each entry names a
// process-wide background worker of the server's dependencies, never a
// function of ashlock, so leaks of ashlock's own goroutines are still
// reported.
func IgnoredGoroutines() []goleak.Option {
	return []goleak.Option{}
}
