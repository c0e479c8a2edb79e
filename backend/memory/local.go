package memory

import "github.com/ash-lock/ashlock/backend"

var _ backend.Local = (*Backend)(nil)

// Local marks the Backend as in-process (backend.Local): its Release and
// Revoke never block, and Revoke ends the waits on the revoked lease, so the
// client skips the timeouts it puts around calls to remote stores.
func (b *Backend) Local() {}

var _ backend.ClaimNamer = (*Backend)(nil)

// NamesClaims marks the Backend as naming its claims itself
// (backend.ClaimNamer). A request without an ID gets the name of the claim
// record that holds it: a UUID made when the record is first used and kept
// while the record is recycled, so it is unique among live claims, and a
// later claim may reuse it once this one is gone (its token differs). The
// client then makes no name per acquisition.
func (b *Backend) NamesClaims() {}
