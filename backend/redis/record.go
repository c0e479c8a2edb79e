package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ash-lock/ashlock/backend"
)

// queued is one claim of a key's queue as a script lists it.
type queued struct {
	id       string
	token    uint64
	lease    backend.LeaseID
	kind     backend.Kind
	admitted bool
	permit   int // backend.NoPermit until admitted
	at       time.Time
	stamp    backend.Timestamp
	owner    string
	value    []byte
	pttl     time.Duration // time left on its lease; negative if unknown
}

var errRecord = errors.New("malformed claim record")

// parseRecord reads a claim record (see scripts.go) into q, owner and
// value included.
func parseRecord(s string, q *queued) error {
	var f [9]string
	rest := s
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, " "); !ok {
			return fmt.Errorf("%w: %q", errRecord, s)
		}
	}
	var nums [7]int64
	for i := range nums {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %q", errRecord, s)
		}
		nums[i] = n
	}
	st, err := parseStamp(f[7])
	if err != nil {
		return fmt.Errorf("%w: %q: %v", errRecord, s, err)
	}
	ol, err := strconv.Atoi(f[8])
	if err != nil || ol < 0 || ol > len(rest) {
		return fmt.Errorf("%w: %q", errRecord, s)
	}
	q.owner, q.value = rest[:ol], nil
	if len(rest) > ol {
		q.value = []byte(rest[ol:])
	}
	q.token, q.lease = uint64(nums[0]), backend.LeaseID(nums[1])
	q.kind = backend.Kind{Permits: int(max(nums[2], 1)), Shared: nums[3] == 1}
	q.admitted, q.permit = nums[4] == 1, int(nums[5])
	if !q.admitted {
		q.permit = backend.NoPermit
	}
	if nums[6] > 0 {
		q.at = time.UnixMilli(nums[6])
	}
	q.stamp = st
	return nil
}

// formatStamp encodes a stamp so that byte order is stamp order (for the
// scripts' comparisons); zero is "0", no stamp.
func formatStamp(t backend.Timestamp) string {
	if t == (backend.Timestamp{}) {
		return "0"
	}
	return fmt.Sprintf("%016x%08x", uint64(t.WallTime), t.Logical)
}

func parseStamp(s string) (backend.Timestamp, error) {
	if s == "0" {
		return backend.Timestamp{}, nil
	}
	if len(s) != 24 {
		return backend.Timestamp{}, fmt.Errorf("stamp %q", s)
	}
	w, err := strconv.ParseUint(s[:16], 16, 64)
	if err != nil {
		return backend.Timestamp{}, err
	}
	l, err := strconv.ParseUint(s[16:], 16, 32)
	if err != nil {
		return backend.Timestamp{}, err
	}
	return backend.Timestamp{WallTime: int64(w), Logical: uint32(l)}, nil
}

// parseQueue reads one key's queue as the scripts' state function lists it.
func parseQueue(v any) ([]queued, error) {
	rows, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: queue reply %T", errRecord, v)
	}
	q := make([]queued, len(rows))
	for i, r := range rows {
		f, ok := r.([]any)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("%w: queue entry %v", errRecord, r)
		}
		id, _ := f[0].(string)
		rec, _ := f[1].(string)
		pttl, _ := f[2].(int64)
		q[i].id = id
		if err := parseRecord(rec, &q[i]); err != nil {
			return nil, err
		}
		q[i].pttl = time.Duration(pttl) * time.Millisecond
		if pttl < 0 {
			q[i].pttl = -1
		}
	}
	return q, nil
}

// parseQueues reads one queue per key from vs.
func parseQueues(vs []any) ([][]queued, error) {
	qs := make([][]queued, len(vs))
	for i, v := range vs {
		q, err := parseQueue(v)
		if err != nil {
			return nil, err
		}
		qs[i] = q
	}
	return qs, nil
}

// kinds returns the kinds of q's claims, for the rules of package backend.
func kinds(q []queued) []backend.Kind {
	ks := make([]backend.Kind, len(q))
	for i := range q {
		ks[i] = q[i].kind
	}
	return ks
}

// describe returns key's state as Inspect and Observe report it.
func describe(key string, q []queued, waiters bool) backend.LockInfo {
	d := make([]backend.Queued, len(q))
	for i := range q {
		c := &q[i]
		d[i] = backend.Queued{
			Kind: c.kind, Token: c.token, Admitted: c.admitted, Permit: c.permit,
			Owner: c.owner, Value: c.value, AcquiredAt: c.at, Stamp: c.stamp,
		}
	}
	return backend.Describe(key, d, waiters)
}
