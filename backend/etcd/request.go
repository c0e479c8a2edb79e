package etcd

import (
	"fmt"

	"github.com/ash-lock/ashlock/backend"
)

// checkRequest rejects what the root package already rejects, so that a
// Backend used directly cannot store a claim its peers cannot read.
func checkRequest(req *backend.AcquireRequest) error {
	n := len(req.Keys)
	if err := backend.CheckValue(req.Value, max(n, 1)); err != nil {
		// Every key's put carries the whole record, value included.
		return fmt.Errorf("etcd acquire %q: %w", req.Key, err)
	}
	switch {
	case req.Permits < 0 || req.Permits > backend.MaxPermits:
		return fmt.Errorf("etcd acquire %q: %d permits", req.Key, req.Permits)
	case req.Shared && req.Permits > 1:
		return fmt.Errorf("etcd acquire %q: a shared claim with %d permits", req.Key, req.Permits)
	case req.Keys == nil:
		return nil
	case n == 0 || n > backend.MaxKeys:
		return fmt.Errorf("etcd acquire: %d keys", n)
	case req.Keys[0] != req.Key:
		return fmt.Errorf("etcd acquire: Keys[0] %q is not Key %q", req.Keys[0], req.Key)
	case n > 1 && req.Permits > 1:
		return fmt.Errorf("etcd acquire: a multi-key claim with %d permits", req.Permits)
	}
	for i := 1; i < n; i++ {
		if req.Keys[i] <= req.Keys[i-1] {
			return fmt.Errorf("etcd acquire: keys not sorted and distinct at %q", req.Keys[i])
		}
	}
	return nil
}
