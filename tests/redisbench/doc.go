// Package redisbench holds benchmarks of ashlock on backend/redis side by
// side with the Redis locks Go services use today (bsm/redislock,
// go-redsync/redsync) and with the backend's own scripts sent by hand, all
// against one redis-server the package starts itself (tests/redistest).
// It has benchmarks only: `go test` runs none of them and stays quick.
//
//	go test -run '^$' -bench . -benchtime 200x ./redisbench/
//
// See BENCHMARKS.md ("Redis") for the figures and the exact commands.
package redisbench
