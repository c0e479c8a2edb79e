package redis

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// keyMessage is one message of a key's channel: the changes one script
// run made at the key, in the order made, or the marker an observer's read
// published (see scripts.go for the format).
type keyMessage struct {
	marker  string // the read's nonce; no changes
	changes []keyChange
}

// keyChange is one change of a key's queue.
type keyChange struct {
	kind byte   // 'j' joined, 'r' record rewritten, 'v' value set, 'd' departed
	c    queued // j, r: the claim; v, d: its token; v: its value
	pttl time.Duration
}

// parseKeyMessage reads a message of a key's channel.
func parseKeyMessage(p string) (keyMessage, error) {
	if nonce, ok := strings.CutPrefix(p, "m "); ok {
		return keyMessage{marker: nonce}, nil
	}
	if p == "" {
		return keyMessage{}, fmt.Errorf("%w: empty key event", errRecord)
	}
	var m keyMessage
	for rest := p; rest != ""; {
		line, after, ok := strings.Cut(rest, "\n")
		f := strings.Split(line, " ")
		if !ok || len(f) != 3 || len(f[0]) != 1 {
			return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 || n > len(after) {
			return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
		}
		body := after[:n]
		rest = after[n:]
		ch := keyChange{kind: f[0][0], pttl: -1}
		switch ch.kind {
		case 'j', 'r':
			ms, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
			}
			if err := parseRecord(body, &ch.c); err != nil {
				return keyMessage{}, err
			}
			ch.pttl = pttlOf(ms)
		case 'v', 'd':
			if ch.c.token, err = strconv.ParseUint(f[1], 10, 64); err != nil {
				return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
			}
			if ch.kind == 'v' && n > 0 {
				ch.c.value = []byte(body)
			} else if ch.kind == 'd' && n > 0 {
				return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
			}
		default:
			return keyMessage{}, fmt.Errorf("%w: key event %q", errRecord, line)
		}
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
