package fencing_test

import (
	"math"
	"testing"

	"github.com/ash-lock/ashlock/fencing"
)

func TestValidateWrite(t *testing.T) {
	tests := []struct {
		name           string
		token, highest uint64
		want           bool
	}{
		{name: "current holder", token: 7, highest: 7, want: true},
		{name: "newer holder", token: 8, highest: 7, want: true},
		{name: "stale holder", token: 6, highest: 7, want: false},
		{name: "nothing admitted yet", token: 1, highest: 0, want: true},
		{name: "zero token on fresh resource", token: 0, highest: 0, want: true},
		{name: "zero token after any", token: 0, highest: 1, want: false},
		{name: "largest token", token: math.MaxUint64, highest: math.MaxUint64 - 1, want: true},
		{name: "one below largest", token: math.MaxUint64 - 1, highest: math.MaxUint64, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fencing.ValidateWrite(tt.token, tt.highest); got != tt.want {
				t.Errorf("ValidateWrite(%d, %d) = %v, want %v", tt.token, tt.highest, got, tt.want)
			}
		})
	}
}
