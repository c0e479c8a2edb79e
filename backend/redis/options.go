package redis

import (
	"log/slog"
	"time"
)

// Option configures New.
type Option func(*options)

type options struct {
	prefix string
	logger *slog.Logger
	onGap  func(from, to time.Time)
}

// WithPrefix sets the prefix of every key and channel the Backend uses
// (default DefaultPrefix, "ashlock:"). Backends with different prefixes
// share a server without seeing each other's locks. Every key is named
// "{prefix}...", so the prefix is the hash tag that keeps a Backend's keys
// in one Redis Cluster slot; a prefix holding '{' or '}', an empty one or
// one longer than 256 bytes makes New fail with ErrInvalidConfig.
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithLogger sets the logger for warnings (keyspace notifications off, a
// cleanup that failed) and debug messages; nil means slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithSubscriberGapHook sets a function the Backend calls each time an
// Observe has read its key's queue again after a gap of the subscriber:
// its connection lost or replaced, or what it received not to be trusted
// to be whole. Messages published after from may have been lost; to is
// when the read returned, and Observe resumes from it. Changes of the key
// made between may be missed by that Observe; none is reordered. f is
// called from the Observes' goroutines, concurrently; it must not block.
func WithSubscriberGapHook(f func(from, to time.Time)) Option {
	return func(o *options) { o.onGap = f }
}
