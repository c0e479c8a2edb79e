//go:build unix

package redisbackend

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ash-lock/ashlock"
	"github.com/ash-lock/ashlock/tests/redistest"
)

// exitNotAcquired is ashlock run's exit code when --try finds the key held.
const exitNotAcquired = 75

// The ashlock command takes, refuses and inspects locks through a
// redis:// seed.
func TestCLIWithRedisSeed(t *testing.T) {
	// A build that misses the cache takes long on a loaded machine.
	bctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "ashlock")
	out, err := exec.CommandContext(bctx, "go", "build", "-o", bin, "github.com/ash-lock/ashlock/cmd/ashlock").CombinedOutput()
	require.NoError(t, err, "building ashlock: %s", out)
	ctx := ctxFor(t)
	seed := srv.URL() + "?ashlock_prefix=" + redistest.Prefix()
	ashlockCmd := func(args ...string) (stdout string, code int) {
		t.Helper()
		var o, e bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return o.String(), exit.ExitCode()
		}
		require.NoError(t, err, "ashlock %q: %s", args, e.String())
		return o.String(), 0
	}

	c, err := ashlock.Connect(ctx, ashlock.LockConfig{ClusterSeed: seed})
	require.NoError(t, err)
	defer c.Close(context.Background())
	g, err := c.Lock("nightly").WithOwner("library-holder").Acquire(ctx)
	require.NoError(t, err)
	tok, err := g.FencingToken()
	require.NoError(t, err)

	_, code := ashlockCmd("run", "--seed", seed, "--try", "nightly", "--", "true")
	assert.Equal(t, exitNotAcquired, code, "run --try on a held key")
	shown, code := ashlockCmd("inspect", "--seed", seed, "nightly")
	assert.Zero(t, code)
	assert.Contains(t, shown, "library-holder")
	assert.Contains(t, shown, strconv.FormatUint(tok, 10))

	require.NoError(t, g.Unlock(ctx))
	printed, code := ashlockCmd("run", "--seed", seed, "--ttl", "5s", "nightly", "--", "sh", "-c", "echo $ASHLOCK_FENCING_TOKEN")
	require.Zero(t, code)
	got, err := strconv.ParseUint(strings.TrimSpace(printed), 10, 64)
	require.NoError(t, err, "printed %q", printed)
	assert.Greater(t, got, tok)
}
