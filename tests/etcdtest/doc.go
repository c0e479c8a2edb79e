// Package etcdtest runs embedded etcd servers for ashlock's integration
// tests, benchmarks and the etcd-dev program: one member or a cluster of
// several, on free loopback ports, with data in a directory of the caller's
// choice, so members can be stopped and restarted with their data.
//
// Test code uses Start and StartCluster, which stop everything in
// t.Cleanup. Other programs use Launch and Close.
//
// The servers log nothing (a no-op logger), elect leaders on etcd's default
// timing (100ms heartbeat, 1s election timeout, so the smallest lease etcd
// grants is 2s), skip fsync (data survives a member's stop and restart
// within the process, not a machine crash) and hash passwords with the
// lowest bcrypt cost.
package etcdtest
