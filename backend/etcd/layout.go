package etcd

import (
	"strconv"

	"github.com/ash-lock/ashlock/backend"
)

// layout computes the etcd keys a Backend uses. Everything is under prefix:
//
//	<prefix>claims/<escaped key>/<claim name> one claim, bound to its lease
//	<prefix>stamps/<escaped key>              the last holder's stamp (no lease)
//	<prefix>fences/<lease>                    the lease's fence (fence.go), bound to it
//
// The directory "<prefix>claims/<escaped key>/" holds exactly one key's
// queue, because an escaped key contains no '/' (see escapeKey). Claims and
// stamp records live in separate subtrees so that a range over a queue
// never meets a stamp.
type layout struct {
	prefix string
}

// dir is the queue directory of key, ending in '/'.
func (l layout) dir(key string) string { return l.prefix + "claims/" + escapeKey(key) + "/" }

// claim is the etcd key of the claim named name on key.
func (l layout) claim(key, name string) string { return l.dir(key) + name }

// stamp is the etcd key of key's stamp record.
func (l layout) stamp(key string) string { return l.prefix + "stamps/" + escapeKey(key) }

// fence is the etcd key of lease id's fence.
func (l layout) fence(id backend.LeaseID) string {
	return l.prefix + "fences/" + strconv.FormatInt(int64(id), 16)
}

// claimName names the claim a Backend makes on one key under lease id: the
// lease in hex, and for the second and later concurrent claims of the same
// lease on the same key a slot number. A name therefore belongs to one lease
// for ever: once the lease has ended, nothing can be created under the name
// again.
func claimName(id backend.LeaseID, slot int) string {
	name := strconv.FormatInt(int64(id), 16)
	if slot > 0 {
		name += "-" + strconv.Itoa(slot)
	}
	return name
}
