package benchrun

import (
	"slices"
	"testing"
	"time"
)

// Percentile returns the p-quantile (0 <= p <= 1) of ds by the
// nearest-rank method: the smallest value with at least p of the values at
// or below it. It returns 0 for no values and does not modify ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p*float64(len(s)) + 0.999999999) // ceil, robust to float error
	return s[min(max(rank, 1), len(s))-1]
}

// Millis returns d in milliseconds, the unit of the latencies reported.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ReportLatencies reports the median, the 99th percentile and the
// maximum of lat in milliseconds, as "<prefix>p50-ms", "<prefix>p99-ms"
// and "<prefix>max-ms". No latency at all fails b: a run that measured
// nothing has no figures to give.
func ReportLatencies(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		b.Fatal("no trial measured")
	}
	b.ReportMetric(Millis(Percentile(lat, 0.50)), prefix+"p50-ms")
	b.ReportMetric(Millis(Percentile(lat, 0.99)), prefix+"p99-ms")
	b.ReportMetric(Millis(Percentile(lat, 1)), prefix+"max-ms")
}
