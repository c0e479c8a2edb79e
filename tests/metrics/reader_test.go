package metrics_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Instrument names, as a dashboard would spell them.
const (
	acquireDuration = "ashlock.acquire.duration"
	waitDuration    = "ashlock.wait.duration"
	holdDuration    = "ashlock.hold.duration"
	held            = "ashlock.held"
	renewals        = "ashlock.renewals"
	leasesLost      = "ashlock.leases.lost"
	renewMargin     = "ashlock.renew.margin"
)

// outcome returns the attribute set of one "outcome" value.
func outcome(v string) attribute.Set { return attribute.NewSet(attribute.String("outcome", v)) }

// noAttrs is the attribute set of instruments recorded without attributes.
var noAttrs = attribute.NewSet()

// meter is an SDK meter provider with a manual reader: the test decides
// when to collect, and every collection sees cumulative totals.
type meter struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

// newMeter returns a meter shut down when the test ends. Inside a synctest
// bubble, call it inside the bubble.
func newMeter(t *testing.T) *meter {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() {
		if err := mp.Shutdown(context.Background()); err != nil {
			t.Errorf("meter provider shutdown: %v", err)
		}
	})
	return &meter{reader: r, mp: mp}
}

// snapshot is one collection, indexed by instrument name.
type snapshot map[string]metricdata.Metrics

func (m *meter) collect(t *testing.T) snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	s := snapshot{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if _, dup := s[md.Name]; dup {
				t.Fatalf("instrument %s reported by two scopes", md.Name)
			}
			s[md.Name] = md
		}
	}
	return s
}

// sum returns the value of an Int64 counter or up-down counter for one
// attribute set, 0 if nothing was recorded.
func (s snapshot) sum(t *testing.T, name string, attrs attribute.Set) int64 {
	t.Helper()
	md, ok := s[name]
	if !ok {
		return 0
	}
	data, ok := md.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, md.Data)
	}
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&attrs) {
			return dp.Value
		}
	}
	return 0
}

// hist returns the data point of a float64 histogram for one attribute
// set; the zero point (Count 0) if nothing was recorded.
func (s snapshot) hist(t *testing.T, name string, attrs attribute.Set) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	md, ok := s[name]
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}
	}
	data, ok := md.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is a %T, want a float64 histogram", name, md.Data)
	}
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&attrs) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

// attrSets returns every attribute set of every data point in s, with the
// name of its instrument.
func (s snapshot) attrSets(t *testing.T) map[string][]attribute.Set {
	t.Helper()
	out := map[string][]attribute.Set{}
	for name, md := range s {
		switch data := md.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		case metricdata.Sum[float64]:
			for _, dp := range data.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range data.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		case metricdata.Gauge[float64]:
			for _, dp := range data.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		case metricdata.Histogram[int64]:
			for _, dp := range data.DataPoints {
				out[name] = append(out[name], dp.Attributes)
			}
		default:
			t.Errorf("%s has data of unexpected type %T; teach attrSets about it", name, md.Data)
		}
	}
	return out
}

// assertNoLockKeys fails the test if any attribute of any data point in s
// carries one of keys (or an owner label) in its value, or in its name.
// Lock keys are unbounded: as attributes they would make one time series
// per key. It also fails if s holds no attribute at all, so that the check
// cannot pass vacuously.
func assertNoLockKeys(t *testing.T, s snapshot, keys ...string) {
	t.Helper()
	seen := 0
	for name, sets := range s.attrSets(t) {
		for _, set := range sets {
			for _, kv := range set.ToSlice() {
				seen++
				v := kv.Value.String()
				for _, k := range keys {
					if strings.Contains(v, k) || strings.Contains(string(kv.Key), k) {
						t.Errorf("%s has attribute %s=%q, which carries lock key %q", name, kv.Key, v, k)
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no attribute recorded at all: the workload did not exercise the outcome attributes")
	}
}
