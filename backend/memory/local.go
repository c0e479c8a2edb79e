package memory

import "github.com/ash-lock/ashlock/backend"

var _ backend.Local = (*Backend)(nil)

// Local marks the Backend as in-process (backend.Local): its Release and
// Revoke never block, and Revoke ends the waits on the revoked lease, so the
// client skips the timeouts it puts around calls to remote stores.
func (b *Backend) Local() {}
