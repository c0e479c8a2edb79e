//go:build unix

// Command ashlock runs a command while holding a distributed lock, shows
// who holds a lock, and follows who leads an election.
//
//	ashlock run [flags] KEY -- COMMAND [ARG...]
//	ashlock inspect [flags] KEY
//	ashlock observe [flags] KEY
//
// See "ashlock --help" for flags, environment and exit codes. The default
// backend is in-process (memory://), which locks nothing across processes;
// real use points --seed or $ASHLOCK_SEED at etcd, PostgreSQL
// (postgres://user@host/db?ashlock_schema=locks) or Redis
// (redis://host:6379/0?ashlock_prefix=locks:).
package main

import (
	"os"

	"github.com/ash-lock/ashlock"
)

func main() {
	survivePipes()
	os.Exit(dispatch(os.Args[1:], &env{
		stdin:   os.Stdin,
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		getenv:  os.Getenv,
		signals: notifySignals,
		connect: ashlock.Connect,
	}))
}
