package claimid

import (
	"sync"
	"testing"

	"github.com/google/uuid"
)

func TestClaimIDsAreDistinctVersion4UUIDs(t *testing.T) {
	ids := New()
	seen := make(map[string]bool)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 3 * idBlock {
				name := ids.Next()
				u, err := uuid.Parse(name)
				if err != nil || u.Version() != 4 || u.Variant() != uuid.RFC4122 || u.String() != name {
					t.Errorf("name %q: parse %v, version %v, variant %v", name, err, u.Version(), u.Variant())
				}
				mu.Lock()
				if seen[name] {
					t.Errorf("name %q handed out twice", name)
				}
				seen[name] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if other := New().Next(); seen[other] {
		t.Errorf("a second Source's first name %q repeats the first Source's", other)
	}
}
