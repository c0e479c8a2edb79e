package redistest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Main starts a server, runs the package's tests with it in *srv, stops
// it, checks for leaked goroutines (goleak, with opts) and exits. Call it
// from TestMain. A server that cannot start fails the whole package:
// tests never skip for want of one.
func Main(m *testing.M, srv **Server, opts ...goleak.Option) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := Start(ctx)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	*srv = s
	code := m.Run()
	if err := s.Close(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, "redistest: close:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
