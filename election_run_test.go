package ashlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/backend/memory"
)

// A term lost after its campaign has won but before Run calls lead: lead
// is never called for it, and Run campaigns again and leads a later term.
//
// The loss is injected in that very window: the client records a
// successful acquisition's duration after the backend has granted the
// claim and checked the guard, and before Acquire returns to Run. The
// meter below expires the lease there, on the first campaign only, and
// waits (synctest.Wait) until the client has been told, so the guard has
// ended by the time Run looks at it.
func TestElectionRunSkipsLeadForATermLostBeforeItStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b := memory.New()
		defer b.Close()
		var c *ashlock.LockClient
		var hooked atomic.Int32
		var lost uint64 // the term expired before lead could start
		mp := acquiredHook(func() {
			if hooked.Add(1) != 1 {
				return
			}
			l, err := c.Election("e").Leader(ctx)
			if !assert.NoError(t, err, "nobody leads once the campaign has won") {
				return
			}
			lost = l.Token
			assert.True(t, b.ExpireKey("e"))
			synctest.Wait() // the backend's loss report reaches the guard
		})
		c, err := ashlock.ConnectWith(t.Context(), ashlock.LockConfig{DefaultTTL: wdTTL, Logger: quiet, MeterProvider: mp}, b)
		require.NoError(t, err)
		defer c.Close(context.Background())

		type call struct {
			token uint64
			err   error // lead's context's, when lead started
		}
		var calls []call
		err = c.Election("e").Run(ctx, nil, func(lctx context.Context, token uint64) error {
			calls = append(calls, call{token, lctx.Err()})
			if lctx.Err() != nil {
				return nil // a term lost already: Run must go on campaigning
			}
			cancel()
			return nil
		})
		assert.ErrorIs(t, err, context.Canceled)
		require.NotZero(t, lost, "the hook never expired a term")
		assert.Equal(t, int32(2), hooked.Load(), "campaigns won")
		require.NotEmpty(t, calls, "Run never led after the lost term")
		for _, cl := range calls {
			assert.True(t, cl.token > lost && cl.err == nil,
				"lead called with token %d and context error %v: the term (%d) was lost before lead started", cl.token, cl.err, lost)
		}
		assert.Len(t, calls, 1, "lead calls: %v", calls)
	})
}

// acquiredHook is a MeterProvider that records nothing but calls f each
// time the client records a successful acquisition (on the goroutine that
// acquires, before Acquire returns).
func acquiredHook(f func()) metric.MeterProvider { return hookProvider{f: f} }

type hookProvider struct {
	noop.MeterProvider
	f func()
}

func (p hookProvider) Meter(string, ...metric.MeterOption) metric.Meter { return hookMeter{f: p.f} }

type hookMeter struct {
	noop.Meter
	f func()
}

func (m hookMeter) Float64Histogram(name string, _ ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	if name != "ashlock.acquire.duration" {
		return noop.Float64Histogram{}, nil
	}
	return hookHistogram{f: m.f}, nil
}

type hookHistogram struct {
	noop.Float64Histogram
	f func()
}

func (hookHistogram) Enabled(context.Context) bool { return true }

func (h hookHistogram) Record(_ context.Context, _ float64, opts ...metric.RecordOption) {
	attrs := metric.NewRecordConfig(opts).Attributes()
	if v, ok := attrs.Value("outcome"); ok && v.AsString() == "acquired" {
		h.f()
	}
}
