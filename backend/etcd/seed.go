package etcd

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrBadSeed reports a cluster seed that ParseSeed cannot read.
var ErrBadSeed = errors.New("etcd: invalid cluster seed")

// seedScheme is the scheme of an etcd cluster seed.
const seedScheme = "etcd://"

// defaultPort is used for a seed host given without a port.
const defaultPort = "2379"

// ParseSeed splits a cluster seed of the form
//
//	etcd://host1:2379,host2:2379/prefix/
//
// into client endpoints ("host1:2379", "host2:2379") and a key prefix
// ("prefix/"). Without a path, or with "/" alone, the prefix is
// DefaultPrefix; a path without a trailing '/' gets one, so "/app" and
// "/app/" both give "app/". A host without a port gets 2379; IPv6 hosts are
// written in brackets ("[::1]:2379").
//
// ParseSeed does not contact etcd. On failure it returns an error wrapping
// ErrBadSeed (and ErrBadPrefix when the path is the problem): another
// scheme, no host, an empty host in the list, a malformed host:port, or a
// query or fragment.
func ParseSeed(seed string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(seed, seedScheme)
	if !ok {
		return nil, "", fmt.Errorf("%w: %q does not start with %q", ErrBadSeed, seed, seedScheme)
	}
	if strings.ContainsAny(rest, "?#") {
		return nil, "", fmt.Errorf("%w: %q: query and fragment are not supported", ErrBadSeed, seed)
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return nil, "", fmt.Errorf("%w: %q names no host", ErrBadSeed, seed)
	}
	for _, h := range strings.Split(hosts, ",") {
		ep, err := endpoint(h)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %q: %v", ErrBadSeed, seed, err)
		}
		endpoints = append(endpoints, ep)
	}
	prefix = DefaultPrefix
	if path != "" {
		prefix = strings.TrimSuffix(path, "/") + "/"
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrBadSeed, seed, err)
	}
	return endpoints, prefix, nil
}

// endpoint validates one host[:port] of a seed and adds the default port.
func endpoint(h string) (string, error) {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port. A bare IPv6 address must be bracketed, or its colons
		// would be read as a port separator.
		host, port = h, defaultPort
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			host = h[1 : len(h)-1]
		} else if strings.Contains(h, ":") {
			return "", fmt.Errorf("malformed host %q", h)
		}
	}
	if host == "" || strings.ContainsAny(host, "[]") {
		return "", fmt.Errorf("malformed host %q", h)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("host %q has a bad port", h)
	}
	return net.JoinHostPort(host, strconv.FormatUint(n, 10)), nil
}
