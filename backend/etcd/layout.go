package etcd

import (
	"fmt"
	"strings"
)

// Namespaces under the Backend's prefix. Claims and stamp records live in
// separate subtrees so that a stamp record can never be taken for a claim
// and a range over the claims never meets a stamp.
const (
	claimsNS = "claims/"
	stampsNS = "stamps/"
)

// layout computes the etcd keys a Backend uses. Everything is under prefix:
//
//	<prefix>claims/<escaped key>/<claim name> one claim, bound to its lease
//	<prefix>stamps/<escaped key>              the last holder's stamp (no lease)
//
// The directory "<prefix>claims/<escaped key>/" holds exactly one key's
// queue, because an escaped key contains no '/' (see escapeKey).
type layout struct {
	prefix string
}

func newLayout(prefix string) layout { return layout{prefix: prefix} }

// claimsRoot is the subtree that holds every claim of every key.
func (l layout) claimsRoot() string { return l.prefix + claimsNS }

// dir is the queue directory of key, ending in '/'.
func (l layout) dir(key string) string {
	return l.prefix + claimsNS + escapeKey(key) + "/"
}

// claim is the etcd key of the claim named name on key.
func (l layout) claim(key, name string) string { return l.dir(key) + name }

// stamp is the etcd key of key's stamp record.
func (l layout) stamp(key string) string {
	return l.prefix + stampsNS + escapeKey(key)
}

// parseClaim splits an etcd key produced by claim back into lock key and
// claim name. It fails on keys outside the claims namespace or with a
// malformed escaped part.
func (l layout) parseClaim(etcdKey string) (key, id string, err error) {
	rest, ok := strings.CutPrefix(etcdKey, l.claimsRoot())
	if !ok {
		return "", "", fmt.Errorf("etcd: key %q is not under %q", etcdKey, l.claimsRoot())
	}
	esc, id, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", fmt.Errorf("etcd: key %q has no claim name", etcdKey)
	}
	key, err = unescapeKey(esc)
	if err != nil {
		return "", "", fmt.Errorf("etcd: key %q: %w", etcdKey, err)
	}
	return key, id, nil
}
