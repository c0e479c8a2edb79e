package ashlock

import (
	"errors"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/ash-lock/ashlock/backend"
	"github.com/ash-lock/ashlock/internal/hlc"
)

// LockConfig configures a LockClient. The zero value is ready to use: an
// in-process backend, 30s TTL, watchdog at a third of each lock's TTL.
type LockConfig struct {
	// DefaultTTL is the lease TTL of locks that do not set one with
	// WithTTL. Zero means 30s; a negative value is ErrInvalidTTL.
	DefaultTTL time.Duration
	// WatchdogInterval is how often leases are renewed. Zero means a third
	// of each lock's TTL. It must be shorter than every TTL it applies to.
	WatchdogInterval time.Duration
	// ClusterSeed selects the backend for Connect: "" or "memory://" is
	// in-process; "etcd://h1:2379,h2:2379/prefix/" is etcd. ConnectWith
	// ignores it.
	ClusterSeed string
	// Stamps turns on hybrid-logical-clock stamps for acquisitions.
	Stamps bool
	// Logger receives warnings (poisoned guards, failed releases) and debug
	// records. Nil means slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the client's metrics. Nil means the otel global
	// provider, which records nothing unless the application installs one.
	MeterProvider metric.MeterProvider
}

// defaultTTL is the lease TTL when neither LockConfig nor the builder set one.
const defaultTTL = 30 * time.Second

// Errors returned by ashlock. Check them with errors.Is: returned errors
// often wrap them or join them with a context's error.
var (
	// ErrLeaseExpired: the guard's lease can no longer be trusted (renewal
	// failed past the local deadline, the lease was revoked, or the claim
	// was deleted). The guard no longer protects anything.
	ErrLeaseExpired = backend.ErrLeaseExpired
	// ErrLocked: TryAcquire found the key held elsewhere.
	ErrLocked = backend.ErrLocked
	// ErrUnlocked: the guard was released by Unlock or Close.
	ErrUnlocked = errors.New("ashlock: guard unlocked")
	// ErrClosed: the LockClient has been closed.
	ErrClosed = backend.ErrClosed
	// ErrInvalidKey: a key is empty, longer than 1024 bytes, not valid
	// UTF-8, or contains a control character.
	ErrInvalidKey = backend.ErrInvalidKey
	// ErrInvalidTTL: a TTL is zero or negative.
	ErrInvalidTTL = errors.New("ashlock: invalid TTL")
	// ErrInvalidConfig: a configuration value is out of range or malformed
	// (unknown ClusterSeed scheme, watchdog interval not below the TTL).
	ErrInvalidConfig = backend.ErrInvalidConfig
	// ErrUnavailable: the backend could not be reached.
	ErrUnavailable = backend.ErrUnavailable
	// ErrClockOffset: with Stamps on, the key's previous holder stamped it
	// further ahead of this process's clock than the maximum offset
	// (500ms); the stamp is refused rather than merged, and the
	// acquisition fails.
	ErrClockOffset = hlc.ErrMaxOffset
	// ErrPermitMismatch: a request's permit count (WithPermits; plain and
	// shared locks count as one) differs from that of the requests already
	// queued on the key.
	ErrPermitMismatch = backend.ErrPermitMismatch
)

// Timestamp is a hybrid logical clock stamp: WallTime in Unix nanoseconds
// and a Logical counter. Compare with Compare or Less.
type Timestamp = hlc.Timestamp

// LockInfo is what Inspect reports about a key: whether it is held, by
// whom (Owner label, Token, AcquiredAt, Stamp of the oldest holder; every
// holder, with its permit, kind and value, in Holders) and the fair
// waiters queued behind the holders, in order.
type LockInfo = backend.LockInfo

// Holder is one holder of a key in LockInfo.Holders.
type Holder = backend.Holder

// Waiter is one queued acquisition in LockInfo.Waiters.
type Waiter = backend.Waiter
