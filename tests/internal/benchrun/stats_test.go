package benchrun_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ash-lock/ashlock/tests/internal/benchrun"
)

// The benchmarks' percentiles are only as good as this function.
func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // 100ms down to 1ms
	}
	tests := []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single p50", []time.Duration{7}, 0.5, 7},
		{"single p99", []time.Duration{7}, 0.99, 7},
		{"p0 is the minimum", hundred, 0, time.Millisecond},
		{"p50 of 1..100", hundred, 0.5, 50 * time.Millisecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Millisecond},
		{"p100 is the maximum", hundred, 1, 100 * time.Millisecond},
		{"p99 of 50 is the 50th", hundred[50:], 0.99, 50 * time.Millisecond},
		{"p50 of two is the lower", []time.Duration{3, 1}, 0.5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, benchrun.Percentile(tt.in, tt.p), "percentile(%d values, %v)", len(tt.in), tt.p)
		})
	}
	t.Run("input left unsorted", func(t *testing.T) {
		in := []time.Duration{3, 1, 2}
		benchrun.Percentile(in, 0.5)
		assert.Equal(t, []time.Duration{3, 1, 2}, in, "percentile reordered its input")
	})
}
