//go:build unix

package pgbackend_test

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
)

// cli builds cmd/ashlock into the test's temporary directory.
func cli(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ashlock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", path, "github.com/ash-lock/ashlock/cmd/ashlock").CombinedOutput(); err != nil {
		t.Fatalf("building ashlock: %v\n%s", err, out)
	}
	return path
}

// The CLI serves postgres:// seeds: run exports the token, --try is
// refused while another holds the key, inspect shows the holder, observe
// prints the leader.
func TestCLIWithPostgresSeed(t *testing.T) {
	bin := cli(t)
	schema := uniqueSchema(t)
	seed := shared.URL(database(t)) + "&ashlock_schema=" + schema
	ctx := testCtx(t, time.Minute)
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err)
		return string(out), 0
	}
	out, code := run("run", "--seed", seed, "job", "--", "sh", "-c", "echo token=$ASHLOCK_FENCING_TOKEN")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "token=")

	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: seed})
	require.NoError(t, err)
	defer c.Close(context.Background())
	g, err := c.Lock("job").WithOwner("the-holder").WithValue([]byte("addr:1")).Acquire(ctx)
	require.NoError(t, err)
	out, code = run("run", "--seed", seed, "--try", "job", "--", "true")
	assert.Equal(t, 75, code, out)
	out, code = run("inspect", "--seed", seed, "job")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "the-holder")

	obs := exec.CommandContext(ctx, bin, "observe", "--seed", seed, "job")
	stdout, err := obs.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, obs.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, line, "the-holder")
	require.NoError(t, obs.Process.Signal(syscall.SIGINT))
	_ = obs.Wait()
	require.NoError(t, g.Unlock(ctx))
}
