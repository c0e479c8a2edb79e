// Package redistest runs a real redis-server for tests: in a temporary
// directory, on a free loopback port, with keyspace notifications of
// generic and expired events on and an append-only file written with
// appendfsync always, so that a restart keeps every acknowledged write.
//
// One Server serves a whole test package (start it in TestMain); tests keep
// apart by a key prefix each (Prefix) or by flushing between them (Flush).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Binary is the redis-server the harness runs unless REDIS_SERVER names
// another; when it is missing, the one on PATH.
const Binary = "/usr/bin/redis-server"

// startAttempts bounds how often Start tries another free port when the
// one it picked was taken by another process meanwhile.
const startAttempts = 5

// Server is one redis-server process. Its methods are safe for concurrent
// use.
type Server struct {
	dir   string
	addr  string   // 127.0.0.1:port, kept across restarts
	extra []string // more redis-server arguments (a cluster node's)

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	stopped bool          // SIGSTOPped
}

// Start starts a server and waits until it answers PING, or ctx ends. On
// failure nothing is left running and the directory is removed.
func Start(ctx context.Context) (*Server, error) { return start(ctx) }

// start is Start with more redis-server arguments.
func start(ctx context.Context, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	var last error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			last = err
			continue
		}
		s := &Server{dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), extra: extra}
		if last = s.start(ctx); last == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: start redis-server: %w", last)
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// URL is a redis:// URL of the server, database 0.
func (s *Server) URL() string { return "redis://" + s.addr + "/0" }

// Dir is the server's working directory (its append-only files).
func (s *Server) Dir() string { return s.dir }

// Client returns a new client of the server; the caller closes it.
func (s *Server) Client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: s.addr})
}

func binary() string {
	if b := os.Getenv("REDIS_SERVER"); b != "" {
		return b
	}
	if _, err := os.Stat(Binary); err != nil {
		if b, err := exec.LookPath("redis-server"); err == nil {
			return b
		}
	}
	return Binary
}

// start runs redis-server on s.addr with s.dir and waits until it serves.
func (s *Server) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(s.addr)
	args := []string{
		"--port", port,
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--notify-keyspace-events", "KEgx",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	args = append(args, s.extra...)
	cmd := exec.Command(binary(), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.stopped = cmd, exited, false
	s.mu.Unlock()
	if err := s.awaitReady(ctx, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%w (log: %s)", err, s.logTail())
	}
	return nil
}

// awaitReady waits until the server answers PING, it exits or ctx ends.
func (s *Server) awaitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := ping(ctx, s.addr); err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// ping sends one PING on a fresh connection.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// logTail returns the end of the server's log, for error messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
