package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerUser is the operating-system user the server runs as when the
// tests run as root.
const ServerUser = "ashlocktest"

// Superuser is the database superuser initdb creates; every connection
// string of a Server logs in as it, without a password (trust
// authentication on loopback and the socket only).
const Superuser = "postgres"

// Server is one PostgreSQL server, started by Launch. Its methods are safe
// for concurrent use.
type Server struct {
	dir  string // temporary directory: data/, the socket and the log
	bin  string
	port int
	cred *syscall.Credential // nil unless the server runs as ServerUser

	// settings are extra "name=value" server settings, given to every
	// start after the defaults (a later one wins).
	settings []string

	mu   sync.Mutex
	proc *os.Process // the postmaster; nil while stopped
	done chan struct{}
}

// Launch runs initdb in a fresh temporary directory and starts the server
// on a free loopback port, waiting until it accepts connections or ctx
// ends. settings are extra "name=value" server settings (for instance
// "max_connections=700"), kept for every restart. On failure nothing is
// left running and the directory is removed. Close stops the server and
// removes the directory.
func Launch(ctx context.Context, settings ...string) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ashlock-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, cred: cred, settings: slices.Clone(settings)}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			s.Close()
			return nil, err
		}
	}
	out, err := s.command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", Superuser,
		"--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			s.Close()
			return nil, err
		}
		err = s.Start(ctx)
		if err == nil {
			return s, nil
		}
		// Another process may have taken the port between freePort and
		// the server's bind: try another one.
		if attempt == 3 || ctx.Err() != nil {
			s.Close()
			return nil, err
		}
	}
}

// binDir finds the PostgreSQL binaries, version 15 preferred.
func binDir() (string, error) {
	if d := os.Getenv("ASHLOCK_PG_BIN"); d != "" {
		return d, nil
	}
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/postgres"); err == nil {
		return "/usr/lib/postgresql/15/bin", nil
	}
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(m) == 0 {
		return "", errors.New("pgtest: no PostgreSQL in /usr/lib/postgresql/*/bin (run scripts/ensure-servers, or set ASHLOCK_PG_BIN)")
	}
	return filepath.Dir(m[len(m)-1]), nil
}

// credential returns the credential to run the server with: nil unless
// running as root, else ServerUser's, creating the user if needed.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(ServerUser)
	if err != nil {
		out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ServerUser).CombinedOutput()
		// Another test binary may have created it meanwhile.
		if u, err = user.Lookup(ServerUser); err != nil {
			return nil, fmt.Errorf("pgtest: create user %s: %v %s", ServerUser, aerr, out)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logFile() string { return filepath.Join(s.dir, "server.log") }

// command prepares a server binary to run as the server's user, killed if
// this process dies (the postmaster's children then exit on their own).
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Start starts a stopped server with its data and waits until it accepts
// connections or ctx ends. Starting a running server does nothing.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	log, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB",
		"-c", "log_min_messages=warning", "-c", "logging_collector=off"}
	for _, kv := range s.settings {
		args = append(args, "-c", kv)
	}
	cmd := s.command(filepath.Join(s.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.proc, s.done = cmd.Process, done
	if err := s.awaitReady(ctx, done); err != nil {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-done
		s.proc, s.done = nil, nil
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return nil
}

// awaitReady waits until the server answers a query. The server offers no
// notification of readiness to an unrelated process, so this one wait
// tries every 20ms.
func (s *Server) awaitReady(ctx context.Context, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-exited:
			return errors.New("pgtest: postgres exited while starting")
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres not ready: %w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// logTail returns the end of the server's log, for error messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logFile())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DSN returns a connection string (key=value form) for database db over
// TCP as Superuser.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", s.port, Superuser, db)
}

// URL returns a postgres:// URL for database db over TCP as Superuser.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.port, db)
}

// Crash stops the server with an immediate shutdown (SIGQUIT: no
// checkpoint, every connection cut at once; the next start runs crash
// recovery) and waits until every server process has exited. Crashing a
// stopped server does nothing.
func (s *Server) Crash() { s.stop(syscall.SIGQUIT) }

// Stop stops the server with a fast shutdown (SIGINT) and waits.
func (s *Server) Stop() { s.stop(syscall.SIGINT) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	// A paused server cannot act on the signal.
	for _, pid := range append(children(s.proc.Pid), s.proc.Pid) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	_ = s.proc.Signal(sig)
	<-s.done
	s.proc, s.done = nil, nil
}

// Restart crashes the server (see Crash) and starts it again with its data,
// waiting until it accepts connections or ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	s.Crash()
	return s.Start(ctx)
}

// Pause stops every process of the server with SIGSTOP: connections stay
// open and nothing answers, as with a hung machine. Resume undoes it.
func (s *Server) Pause() error { return s.signalGroup(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signalGroup(syscall.SIGCONT) }

// signalGroup signals the postmaster and every process it forked. The
// server's processes do not share a process group (each backend calls
// setsid), so they are found by parent in /proc.
func (s *Server) signalGroup(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("pgtest: server not running")
	}
	pids := append(children(s.proc.Pid), s.proc.Pid)
	if sig == syscall.SIGCONT {
		slices.Reverse(pids) // the postmaster first, so it forks no one while the others stop
	}
	var errs []error
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// children returns the pids of the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// Terminate ends, with pg_terminate_backend, every connection to the
// server whose application_name is app (connections of other applications
// and the caller's own are kept), and returns how many it ended.
func (s *Server) Terminate(ctx context.Context, app string) (int, error) {
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var n int
	err = c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n)
	return n, err
}

// CreateDatabase creates a database named name and returns it.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// Close stops the server (fast shutdown) and removes its directory. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.Stop()
	if s.dir == "" || !strings.Contains(s.dir, "ashlock-pg-") {
		return nil
	}
	return os.RemoveAll(s.dir)
}
