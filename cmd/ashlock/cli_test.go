package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestForPeopleRoundsToThreeDigits(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want string
	}{
		{"a third of 5s", 5 * time.Second / 3, "1.67s"},
		{"a third of 1.5s", 500 * time.Millisecond, "500ms"},
		{"a third of 100ms", 100 * time.Millisecond / 3, "33.3ms"},
		{"a third of 1ms", time.Millisecond / 3, "333µs"},
		{"whole seconds stay whole", 10 * time.Second, "10s"},
		{"minutes", 100*time.Second + 123*time.Millisecond, "1m40s"},
		{"nanoseconds", 7, "7ns"},
		{"zero", 0, "0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, forPeople(tt.in).String())
		})
	}
}
