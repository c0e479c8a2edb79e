package redis

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ash-lock/ashlock/backend"
)

// DefaultPrefix is the key prefix of a Backend made without WithPrefix.
const DefaultPrefix = "ashlock:"

// maxPrefixLen bounds a prefix, which is part of every key name.
const maxPrefixLen = 256

// layout names a Backend's Redis keys. Every name starts with the hash tag
// "{prefix}", so Redis Cluster keeps them all in one slot and a script
// may touch any of them:
//
//	{p}token          the last fencing token issued
//	{p}leases         the last lease id issued
//	{p}lease:<id>     a lease, expiring with it; its value is its TTL in ms
//	{p}lc:<id>        the claims of lease <id> ("<claim id>\n<key>")
//	{p}q:<key>        the queue of a lock key: claim ids scored by token
//	{p}c:<key>        the claims' records at that key, owner and value included
//	{p}s:<key>        the highest stamp recorded at that key
//	{p}e:<token>      the channel of the events of the claim with that token
//	{p}k:<key>        the channel of the events of every claim at that key
//	{p}route          a channel nothing is published on (see routeChannels)
//	{p}pend           releases not yet in the append-only file (see releaseScript)
type layout struct {
	tag string // "{" + prefix + "}"
}

func newLayout(prefix string) (layout, error) {
	if err := checkPrefix(prefix); err != nil {
		return layout{}, err
	}
	return layout{tag: "{" + prefix + "}"}, nil
}

// checkPrefix reports why p cannot be a prefix: braces would end the hash
// tag early or start another, control characters would break the
// keyspace notification channels, and an empty or overlong one is a
// mistake.
func checkPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: redis: empty prefix", backend.ErrInvalidConfig)
	case len(p) > maxPrefixLen:
		return fmt.Errorf("%w: redis: prefix of %d bytes, longer than %d", backend.ErrInvalidConfig, len(p), maxPrefixLen)
	case strings.ContainsAny(p, "{}"):
		return fmt.Errorf("%w: redis: prefix %q holds a brace, which would break its hash tag", backend.ErrInvalidConfig, p)
	}
	if err := backend.CheckKey(p); err != nil {
		return fmt.Errorf("%w: redis: prefix %q: %v", backend.ErrInvalidConfig, p, err)
	}
	return nil
}

func (l layout) token() string { return l.tag + "token" }

// leaseIndex is the key of the index of lease id's claims.
func (l layout) leaseIndex(id backend.LeaseID) string {
	return l.tag + "lc:" + strconv.FormatInt(int64(id), 10)
}

// claimChannel and keyChannel name the channels a claim's events go to.
func (l layout) claimChannel(token uint64) string {
	return l.tag + "e:" + strconv.FormatUint(token, 10)
}
func (l layout) keyChannel(key string) string { return l.tag + "k:" + key }

// backendChannel is the channel of the Backend whose claim names begin
// with base: a removal tells the claim just behind the removed one there
// (see drop in scripts.go).
func (l layout) backendChannel(base string) string { return l.tag + "b:" + base }

// leaseSpace is the keyspace notification pattern of every lease of the
// layout in database db, with the glob characters of the tag escaped.
func (l layout) leaseSpace(db int) string {
	return fmt.Sprintf("__keyspace@%d__:", db) + globEscape(l.tag+"lease:") + "*"
}

// routeChannels returns the channels a subscriber connection holds for
// its routing alone. go-redis's cluster client makes a subscriber
// connection on the node of its first channel's hash tag (of the lease
// notifications' pattern when it has no channel), and only that node
// publishes the notifications of the prefix's leases. The pattern escapes
// the glob characters of the tag, which changes its hash tag: a prefix
// holding one has a channel of its own tag subscribed first, and kept on
// every connection, so that the connection is made on the prefix's node.
func (l layout) routeChannels() []string {
	if globEscape(l.tag) == l.tag {
		return nil
	}
	return []string{l.tag + "route"}
}

// leaseOf returns the lease a keyspace notification channel names.
func (l layout) leaseOf(channel string) (backend.LeaseID, bool) {
	_, name, ok := strings.Cut(channel, "__:")
	if !ok {
		return 0, false
	}
	s, ok := strings.CutPrefix(name, l.tag+"lease:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return backend.LeaseID(id), true
}

// globEscape escapes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
