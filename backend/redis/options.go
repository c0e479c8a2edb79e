package redis

import "log/slog"

// Option configures New.
type Option func(*options)

type options struct {
	prefix string
	logger *slog.Logger
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
