// Package etcdbackend_test runs ashlock's etcd backend against an embedded
// etcd: the backendtest conformance suite, and integration tests for what
// only a real etcd can show (restarts, authentication, lost replies,
// compaction, operator deletes).
//
// Most tests share one single-member server started in TestMain and keep
// apart by using a prefix each; tests that restart, reconfigure or break
// the server start their own.
package etcdbackend_test
