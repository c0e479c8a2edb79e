package ashlock

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metrics holds the client's OpenTelemetry instruments. Keys never appear
// in attributes: a service may lock millions of distinct keys, and each
// attribute value is a separate time series.
type metrics struct {
	acquireDur metric.Float64Histogram
	waitDur    metric.Float64Histogram
	holdDur    metric.Float64Histogram
	heldLocks  metric.Int64UpDownCounter
	renewals   metric.Int64Counter
	leasesLost metric.Int64Counter
	marginHist metric.Float64Histogram
}

// outcome holds one "outcome" attribute prebuilt as the option slices the
// instruments take, so that recording passes them with ... and builds
// nothing per call.
type outcome struct {
	rec []metric.RecordOption
	add []metric.AddOption
}

func newOutcome(v string) outcome {
	opt := metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", v)))
	return outcome{rec: []metric.RecordOption{opt}, add: []metric.AddOption{opt}}
}

var (
	attrAcquired  = newOutcome("acquired")
	attrLocked    = newOutcome("locked")
	attrCancelled = newOutcome("cancelled")
	attrExpired   = newOutcome("lease_expired")
	attrError     = newOutcome("error")
	attrOK        = newOutcome("ok")
)

// Bucket boundaries, in seconds, suggested to the SDK for each histogram
// (an application's views override them). Without them the SDK's defaults,
// made for milliseconds (0, 5, 10, 25 ... 10000), would put nearly every
// sample of these second-valued histograms in one bucket.
var (
	// latencyBounds: an uncontended acquisition takes well under a
	// millisecond in process and a round trip or two on etcd; waits behind
	// a holder can last minutes.
	latencyBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	// holdBounds: critical sections from a millisecond to an hour.
	holdBounds = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
	// marginBounds: what matters is how close renewals come to the
	// deadline, so the low end is fine-grained; the top covers the default
	// 30s TTL.
	marginBounds = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 25, 30, 60}
)

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter("github.com/ash-lock/ashlock")
	var errs []error
	hist := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	out := &metrics{
		acquireDur: hist("ashlock.acquire.duration", "Time from Acquire or TryAcquire to its outcome.", latencyBounds),
		waitDur:    hist("ashlock.wait.duration", "Time a successful Acquire spent waiting for the key.", latencyBounds),
		holdDur:    hist("ashlock.hold.duration", "Time from acquisition to Unlock.", holdBounds),
		marginHist: hist("ashlock.renew.margin", "Time left on a lease's local deadline when a renewal was confirmed.", marginBounds),
	}
	var err error
	out.heldLocks, err = m.Int64UpDownCounter("ashlock.held", metric.WithUnit("{lock}"), metric.WithDescription("Guards currently held."))
	errs = append(errs, err)
	out.renewals, err = m.Int64Counter("ashlock.renewals", metric.WithUnit("{renewal}"), metric.WithDescription("Lease renewals, by outcome."))
	errs = append(errs, err)
	out.leasesLost, err = m.Int64Counter("ashlock.leases.lost", metric.WithUnit("{lease}"), metric.WithDescription("Leases poisoned because they could no longer be trusted."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(ErrInvalidConfig, err)
	}
	return out, nil
}

// timing reports whether the durations are recorded at all; without an SDK
// installed they are not, and the clock reads can be skipped.
func (m *metrics) timing() bool {
	ctx := context.Background()
	return m.acquireDur.Enabled(ctx) || m.holdDur.Enabled(ctx)
}

func (m *metrics) acquired(start time.Time, wait bool) {
	if start.IsZero() {
		return
	}
	d := time.Since(start).Seconds()
	m.acquireDur.Record(context.Background(), d, attrAcquired.rec...)
	if wait {
		m.waitDur.Record(context.Background(), d)
	}
}

func (m *metrics) failed(start time.Time, err error) {
	if start.IsZero() {
		return
	}
	opt := attrError
	switch {
	case errors.Is(err, ErrLocked):
		opt = attrLocked
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		opt = attrCancelled
	case errors.Is(err, ErrLeaseExpired):
		opt = attrExpired
	}
	m.acquireDur.Record(context.Background(), time.Since(start).Seconds(), opt.rec...)
}

func (m *metrics) held(delta int64) { m.heldLocks.Add(context.Background(), delta) }

func (m *metrics) holdTime(d time.Duration) {
	m.holdDur.Record(context.Background(), d.Seconds())
}

func (m *metrics) renewal(err error) {
	opt := attrError
	switch {
	case err == nil:
		opt = attrOK
	case errors.Is(err, ErrLeaseExpired):
		opt = attrExpired
	}
	m.renewals.Add(context.Background(), 1, opt.add...)
}

func (m *metrics) renewMargin(d time.Duration) {
	m.marginHist.Record(context.Background(), d.Seconds())
}

func (m *metrics) leaseLost() { m.leasesLost.Add(context.Background(), 1) }
