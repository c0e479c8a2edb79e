package bench_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ash-lock/ashlock/tests/etcdtest"
)

// serveEnv, set to serveValue, turns this test binary into the etcd member
// the benchmarks talk to (see serveEtcd).
const (
	serveEnv   = "ASHLOCK_BENCH_ETCD"
	serveValue = "serve"
	// readyLine prefixes the line on which the child reports its endpoint.
	readyLine = "endpoint "
	// serverProfileEnv names a file to which the etcd child writes a CPU
	// profile of the whole run, to see the server's side of a benchmark:
	//
	//	ASHLOCK_BENCH_SERVER_CPUPROFILE=/tmp/etcd.pprof go test -bench ...
	serverProfileEnv = "ASHLOCK_BENCH_SERVER_CPUPROFILE"
)

// profileCPU starts a CPU profile written to path; call stop to finish it.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == serveValue {
		os.Exit(serveEtcd())
	}
	if impl := os.Getenv(crashChildEnv); impl != "" {
		os.Exit(crashChild(impl))
	}
	goleak.VerifyTestMain(withServer{m}, etcdtest.IgnoredGoroutines()...)
}

// withServer runs the tests and benchmarks, then stops the etcd child if one
// was started, so that goleak looks for leaks with everything closed.
type withServer struct{ m *testing.M }

func (w withServer) Run() int {
	code := w.m.Run()
	if err := server.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: stopping etcd:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// serveEtcd runs a one-member embedded etcd, prints its client endpoint and
// serves until standard input reaches EOF, which happens when the parent
// closes the pipe or dies. Running the member in another process keeps its
// heap, goroutines and CPU time out of the benchmark's own figures.
func serveEtcd() int {
	if path := os.Getenv(serverProfileEnv); path != "" {
		stop, err := profileCPU(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: etcd child:", err)
			return 1
		}
		defer stop()
	}
	e, dir, err := startMember()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: etcd child:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	fmt.Printf("%s%s\n", readyLine, e.Clients[0].Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	e.Close()
	return 0
}

// server is the etcd child shared by every benchmark and test of the run,
// started by the first that needs it. Plain `go test` starts it only for
// TestLockAllNoDeadlock.
var server etcdChild

type etcdChild struct {
	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	endpoint string
	err      error
}

// endpoints starts the child on first use and returns its client endpoint,
// failing b if it cannot be started.
func (s *etcdChild) endpoints(b testing.TB) []string {
	b.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endpoint == "" && s.err == nil {
		s.err = s.start()
	}
	if s.err != nil {
		b.Fatalf("bench: etcd child: %v", s.err)
	}
	return []string{s.endpoint}
}

func (s *etcdChild) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+serveValue)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	line := make(chan string, 1)
	go func() {
		// Read the ready line only; the child prints nothing else.
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		ep, ok := strings.CutPrefix(strings.TrimSpace(l), readyLine)
		if !ok {
			_ = stdin.Close()
			_ = cmd.Wait()
			return fmt.Errorf("unexpected first line %q", l)
		}
		s.cmd, s.stdin, s.endpoint = cmd, stdin, ep
		return nil
	case <-time.After(etcdtest.StartTimeout + 5*time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-line
		return fmt.Errorf("no endpoint within %v", etcdtest.StartTimeout)
	}
}

// stop closes the child's standard input and waits for it to exit.
func (s *etcdChild) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		s.cmd = nil
		return err
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		err := <-done
		s.cmd = nil
		return fmt.Errorf("did not exit within 30s after EOF; killed (%v)", err)
	}
}
