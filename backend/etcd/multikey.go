package etcd

import clientv3 "go.etcd.io/etcd/client/v3"

// Multi-key claims (AcquireRequest.Keys) take the paths of every claim
// (acquire.go, and the package documentation); this file holds what only
// they need: the bounds that keep their requests within etcd's limits.
// (The check after waiting that the claim still exists at every key is at
// the end of enqueue.)
//
// etcd limits the longest of a Txn's lists (compares, success ops, failure
// ops) to --max-txn-ops, 128 by default, and a nested Txn's to what the
// outer one leaves of it; with at most backend.MaxKeys (64) keys every Txn
// below stays within that:
//
//	enqueue:  If(own name absent per key, fence) Then(Get ahead per key, Put per key),
//	          then Get own name per key and fence if it failed
//	try:      If(queue free per key, fence) Then(Put per key)
//	          Else(Get the blocking claim per key, Get own name per key),
//	          then Get fence if nothing blocks (for a counted claim, in Else),
//	          or those reads in a Txn of their own after it failed (see maxTxnBytes)
//	cleanup:  If(fence) Then(Put fence, Delete per key), after a lost reply (fence.go)
//	confirm:  If(identity per key), after waiting, unless stamps (whose Txn compares the same)
//	release:  Then(Delete per key), or Then(Txn If(identity) Then(Delete) per key)
//	stamps:   Then(Get stamp per key); then If(identity, stamp unchanged per key)
//	          Then(Put stamp, Put record per key) Else(Get stamp, Get claim per key),
//	          or those reads in a Txn of their own after it failed (see maxTxnBytes)
//	SetValue: If(identity per key) Then(Put record per key)
//
// so that uncontended a multi-key claim takes one round trip to make
// (three with stamps: the stamp records are read and written in Txns of
// their own, since with the enqueue's reads and puts they would not fit)
// and one to release, whatever the number of keys.
//
// etcd also refuses requests over --max-request-bytes, 1.5 MiB by default.
// The largest of these Txns, with backend.MaxKeys keys of the longest
// length, each byte of which escapeKey expands to three, the longest
// prefix and owner label, and a value of backend.MaxValueTotal bytes in
// all, are the enqueue, the try without its reads and the stamps' write;
// each names every key's etcd key about four times and carries the value
// once, and stays within the default limit.

// maxTxnBytes bounds the size of a multi-key Txn that carries reads besides
// its compares and writes. etcd refuses requests over its
// --max-request-bytes, 1.5 MiB by default; with backend.MaxKeys keys of the
// longest length, made of bytes that escapeKey expands, and a value of
// backend.MaxValueTotal bytes in all, the compares and writes alone take
// most of that. A Txn that would exceed maxTxnBytes with its reads leaves
// them out and reads in a request of its own when it needs them.
const maxTxnBytes = 1 << 20

// fitting returns reads, to carry in the Else branch of a Txn of cmps and
// ops, if the Txn then stays within maxTxnBytes, and nil if not (the
// caller then reads in a Txn of its own when it needs them). It estimates
// the size of the Txn as etcd receives it: the bytes of every key, range
// end and value, and a bound on the framing of each item.
func fitting(cmps []clientv3.Cmp, ops, reads []clientv3.Op) []clientv3.Op {
	const framing = 32
	n := 0
	for i := range cmps {
		n += len(cmps[i].KeyBytes()) + len(cmps[i].GetCompare().RangeEnd) + framing
	}
	for _, op := range append(ops[:len(ops):len(ops)], reads...) {
		n += len(op.KeyBytes()) + len(op.RangeBytes()) + len(op.ValueBytes()) + framing
	}
	if n > maxTxnBytes {
		return nil
	}
	return reads
}
