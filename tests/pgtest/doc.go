// Package pgtest runs real PostgreSQL servers for ashlock's integration
// tests: initdb in a fresh temporary directory, a free loopback port, the
// unix socket in the same directory, stopped and removed at the end.
//
// PostgreSQL refuses to run as root, so when the tests run as root the
// server runs as the unprivileged user ServerUser, which Launch creates
// with useradd if it is missing and which owns the temporary directory.
//
// The server skips fsync: data survives an immediate shutdown and restart
// (the kernel still has it), not a machine crash. Commits are synchronous,
// so nothing a client was told is committed is lost to an immediate
// shutdown.
//
// Test code uses Start, or WithShared for one server per test package, and
// NewDatabase for a fresh database per test. Fault helpers: Crash and
// Restart (an immediate shutdown and a start with the same data), Pause and
// Resume (SIGSTOP and SIGCONT of every server process), Terminate
// (pg_terminate_backend of the connections of an application name), and a
// Proxy per client whose Blackhole drops bytes and whose Hold holds them
// until released.
package pgtest
