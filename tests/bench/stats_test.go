package bench_test

import (
	"slices"
	"time"
)

// percentile returns the p-quantile (0 <= p <= 1) of ds by the
// nearest-rank method: the smallest value with at least p of the values at
// or below it. It returns 0 for no values and does not modify ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p*float64(len(s)) + 0.999999999) // ceil, robust to float error
	return s[min(max(rank, 1), len(s))-1]
}
