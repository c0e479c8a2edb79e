package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// stopGrace is how long Close waits for a SIGTERMed server before killing it.
const stopGrace = 5 * time.Second

// Close stops the server (SIGTERM, then SIGKILL after a grace period) and
// removes its directory. Calling it again does nothing.
func (s *Server) Close() error {
	s.mu.Lock()
	cmd, exited, stopped := s.cmd, s.exited, s.stopped
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return os.RemoveAll(s.dir)
}

// Restart kills the server with SIGKILL, so that only what it had already
// written to its append-only file survives, and starts it again on the
// same port with the same directory. It returns once the server answers
// again, or ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Crash(); err != nil {
		return err
	}
	return s.Revive(ctx)
}

// Crash kills the server with SIGKILL and waits for it to exit: only what
// it had already written to its append-only file survives. Revive starts
// it again.
func (s *Server) Crash() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return errors.New("redistest: crash of a closed server")
	}
	_ = cmd.Process.Kill()
	<-exited
	return nil
}

// Revive starts a crashed server again on the same port with the same
// directory, and returns once it answers, or ctx ends.
func (s *Server) Revive(ctx context.Context) error {
	s.mu.Lock()
	closed := s.cmd == nil
	s.mu.Unlock()
	if closed {
		return errors.New("redistest: revival of a closed server")
	}
	// The port is ours again at once on loopback; another process taking
	// it in between is possible but rare enough to fail the test on.
	var err error
	for range startAttempts {
		if err = s.start(ctx); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("redistest: restart: %w", err)
	}
	return nil
}

// Pause freezes the server with SIGSTOP: connections stay open and nothing
// is answered until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, stopped bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: signal to a closed server")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return err
	}
	s.stopped = stopped
	return nil
}

// KillClients closes every client connection of the server (CLIENT KILL
// of the normal and pubsub types) but the one it uses to ask, and returns
// how many it closed.
func (s *Server) KillClients(ctx context.Context) (int64, error) {
	c := s.Client()
	defer c.Close()
	var n int64
	for _, typ := range []string{"normal", "pubsub"} {
		k, err := c.Do(ctx, "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").Int64()
		if err != nil {
			return n, fmt.Errorf("redistest: CLIENT KILL TYPE %s: %w", typ, err)
		}
		n += k
	}
	return n, nil
}

// Flush removes every key of every database (FLUSHALL SYNC).
func (s *Server) Flush(ctx context.Context) error {
	c := s.Client()
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

var prefixes atomic.Int64

// Prefix returns a key prefix no other call of this process returns, for
// a test to keep its keys apart from other tests' on a shared server.
func Prefix() string {
	return fmt.Sprintf("t%d:", prefixes.Add(1))
}
