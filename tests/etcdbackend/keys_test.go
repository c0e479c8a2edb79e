package etcdbackend_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// Keys that are prefixes of one another never share a queue: each can be
// held at once, and each claim's directory is disjoint from the others'.
func TestPrefixKeysHaveSeparateQueues(t *testing.T) {
	prefix := uniquePrefix(t)
	b, _ := newBackend(t, shared, prefix)
	l := grant(t, b, 30*time.Second)
	names := []string{"a", "a/b", "a/", "a%2F", "a%", "orders/4", "orders/42", "orders/4/2"}
	var claims []backend.Claim
	for _, k := range names {
		r := request(k, l, "holder of "+k)
		r.Wait = false // TryAcquire: fails if another key's claim were in the way
		claims = append(claims, acquire(t, b, r))
	}
	for i, c := range claims {
		info, err := b.Inspect(testCtx(t, waitBound), c.Key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Token != c.Token || len(info.Waiters) != 0 {
			t.Errorf("Inspect %q: held %v token %d, %d waiters; want only its own holder %d",
				c.Key, info.Held, info.Token, len(info.Waiters), c.Token)
		}
		dir := strings.TrimSuffix(b.ClaimKey(c), c.ID)
		for j, o := range claims {
			if i != j && strings.HasPrefix(b.ClaimKey(o), dir) {
				t.Errorf("claim of %q (%s) lies in the queue of %q (%s)", o.Key, b.ClaimKey(o), c.Key, dir)
			}
		}
	}
}
