package fencing_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ash-lock/ashlock/fencing"
)

// admission is one call to Admit and its expected outcome.
type admission struct {
	resource string
	token    uint64
	stale    bool   // want a *StaleTokenError
	highest  uint64 // want Highest(resource) afterwards
}

func TestFenceAdmit(t *testing.T) {
	tests := []struct {
		name  string
		calls []admission
	}{
		{
			name: "first token admitted",
			calls: []admission{
				{resource: "r", token: 5, highest: 5},
			},
		},
		{
			name: "zero token admitted on fresh resource",
			calls: []admission{
				{resource: "r", token: 0, highest: 0},
				{resource: "r", token: 1, highest: 1},
				{resource: "r", token: 0, stale: true, highest: 1},
			},
		},
		{
			name: "same token admitted again",
			calls: []admission{
				{resource: "r", token: 7, highest: 7},
				{resource: "r", token: 7, highest: 7},
			},
		},
		{
			name: "higher token raises the mark",
			calls: []admission{
				{resource: "r", token: 7, highest: 7},
				{resource: "r", token: 9, highest: 9},
			},
		},
		{
			name: "stale token refused and mark kept",
			calls: []admission{
				{resource: "r", token: 7, highest: 7},
				{resource: "r", token: 8, highest: 8},
				{resource: "r", token: 7, stale: true, highest: 8},
				{resource: "r", token: 8, highest: 8},
			},
		},
		{
			name: "resources are independent",
			calls: []admission{
				{resource: "orders/4", token: 10, highest: 10},
				{resource: "orders/42", token: 3, highest: 3},
				{resource: "orders/4", token: 4, stale: true, highest: 10},
				{resource: "orders/42", token: 4, highest: 4},
			},
		},
		{
			name: "empty resource name is a resource like any other",
			calls: []admission{
				{resource: "", token: 2, highest: 2},
				{resource: "", token: 1, stale: true, highest: 2},
				{resource: "x", token: 1, highest: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f fencing.Fence // the zero value is ready
			for i, c := range tt.calls {
				err := f.Admit(c.resource, c.token)
				if c.stale {
					checkStale(t, err, c.resource, c.token)
				} else if err != nil {
					t.Errorf("call %d: Admit(%q, %d) = %v, want nil", i, c.resource, c.token, err)
				}
				if got := f.Highest(c.resource); got != c.highest {
					t.Errorf("call %d: Highest(%q) = %d, want %d", i, c.resource, got, c.highest)
				}
			}
		})
	}
}

// checkStale asserts err is a refusal of token for resource carrying a
// higher mark, visible through errors.Is and errors.As.
func checkStale(t *testing.T, err error, resource string, token uint64) {
	t.Helper()
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("Admit(%q, %d) = %v, want ErrStaleToken", resource, token, err)
	}
	var se *fencing.StaleTokenError
	if !errors.As(err, &se) {
		t.Fatalf("Admit error %T is not a *StaleTokenError", err)
	}
	if se.Resource != resource || se.Token != token || se.Highest <= token {
		t.Errorf("StaleTokenError = %+v, want Resource %q, Token %d, Highest above it", *se, resource, token)
	}
}

func TestFenceHighestUnknownResource(t *testing.T) {
	var f fencing.Fence
	if got := f.Highest("never-seen"); got != 0 {
		t.Errorf("Highest of unknown resource = %d, want 0", got)
	}
	if err := f.Admit("other", 3); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if got := f.Highest("never-seen"); got != 0 {
		t.Errorf("Highest of unknown resource after another's Admit = %d, want 0", got)
	}
}

func TestStaleTokenError(t *testing.T) {
	err := &fencing.StaleTokenError{Resource: "orders/42", Token: 6, Highest: 7}
	tests := []struct {
		name string
		err  error
	}{
		{name: "bare", err: err},
		{name: "wrapped with fmt", err: fmt.Errorf("write rejected: %w", err)},
		{name: "joined", err: errors.Join(errors.New("other"), err)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, fencing.ErrStaleToken) {
				t.Errorf("errors.Is(%v, ErrStaleToken) = false", tt.err)
			}
			var se *fencing.StaleTokenError
			if !errors.As(tt.err, &se) || se != err {
				t.Errorf("errors.As did not find the *StaleTokenError in %v", tt.err)
			}
		})
	}
	t.Run("message", func(t *testing.T) {
		msg := err.Error()
		for _, part := range []string{fencing.ErrStaleToken.Error(), " 6 ", `"orders/42"`, "7"} {
			if !strings.Contains(msg, part) {
				t.Errorf("message %q does not contain %q", msg, part)
			}
		}
	})
	t.Run("other errors do not match", func(t *testing.T) {
		if errors.Is(errors.New("fencing: stale token"), fencing.ErrStaleToken) {
			t.Error("an unrelated error with the same text matched ErrStaleToken")
		}
	})
}
