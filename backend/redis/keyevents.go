package redis

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// keyMessage is one message of a key's channel: the changes one script
// run made at the key, in the order made (see scripts.go for the format).
type keyMessage struct {
	order   uint64
	changes []keyChange
}

// keyChange is one change of a key's queue.
type keyChange struct {
	kind byte   // 'j' joined, 'r' record rewritten, 'v' value set, 'd' departed
	c    queued // j: the claim; r: its record (no owner or value); v, d: its token; v: its value
	pttl time.Duration
}

// parseKeyMessage reads a message of a key's channel.
func parseKeyMessage(p string) (keyMessage, error) {
	head, rest, ok := strings.Cut(p, "\n")
	n, err := strconv.ParseUint(head, 10, 64)
	if !ok || err != nil {
		return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, head)
	}
	m := keyMessage{order: n}
	for rest != "" {
		line, after, ok := strings.Cut(rest, "\n")
		f := strings.SplitN(line, " ", 4)
		if !ok || len(f) != 4 || len(f[0]) != 1 {
			return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
		}
		ol, err1 := strconv.Atoi(f[1])
		vl, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || ol < 0 || vl < 0 || ol+vl > len(after) {
			return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
		}
		ch := keyChange{kind: f[0][0]}
		switch ch.kind {
		case 'j', 'r':
			ttl, rec, _ := strings.Cut(f[3], " ")
			ms, err := strconv.ParseInt(ttl, 10, 64)
			if err != nil {
				return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
			}
			if err := parseRecord(rec, &ch.c); err != nil {
				return keyMessage{}, err
			}
			ch.pttl = pttlOf(ms)
		case 'v', 'd':
			if ch.c.token, err = strconv.ParseUint(f[3], 10, 64); err != nil {
				return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
			}
		default:
			return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
		}
		ch.c.owner = after[:ol]
		if vl > 0 {
			ch.c.value = []byte(after[ol : ol+vl])
		}
		rest = after[ol+vl:]
		m.changes = append(m.changes, ch)
	}
	return m, nil
}

// pttlOf converts a PTTL reply: negative (no such lease, or no expiry)
// becomes -1, unknown.
func pttlOf(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}
