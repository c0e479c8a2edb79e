package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// workerEnv, when set in the environment, makes the test binary run as a
// child lock holder (see worker_test.go) instead of running tests.
const workerEnv = "ASHLOCK_CHAOS_WORKER"

// The parent and a child talk in JSON lines: the child's stdin carries the
// parent's messages, its stdout the child's. Message types:
//
//	parent → child
//	  cfg     first line: the workerConfig
//	  res     answer to rread/rwrite: ok, v
//	  go      answer to rbegin or acall: the parent has taken the call
//	          time; or to probe: the parent has taken the check's time
//	  stop    finish the current step, unlock, close, say bye, exit
//
//	child → parent
//	  ready   connected, about to start
//	  acall   about to call Acquire (answer: go)
//	  acq     acquired: tok, stamp, permit p, keys (an election
//	          candidate: lead was called for term tok)
//	  rread   read the resource with tok (answer: res); res names a
//	          permit's register or the election's, or is empty for the
//	          mutex workload's
//	  rwrite  write v with tag to the resource with tok (answer: res);
//	          k is "late" for an election leader's write after its term's
//	          context ended
//	  tread   read the balances of the accounts keys with tok (answer:
//	          res with vs)
//	  twrite  write balances vs to the accounts keys with tok and tag
//	          (answer: res)
//	  rbegin  about to run a register Txn (k, tok, v, tag; answer: go)
//	  rend    the register Txn's outcome: s, v
//	  probe   about to check the guard, or for an election leader
//	          whether lead's context is still alive (answer: go)
//	  probed  the check's outcome: ok; k is "done" if the guard's (the
//	          context's) Done had been seen closed before the check, or
//	          "late" for a belief a leader reported after its term's
//	          context ended (the negative control)
//	  bye     stopped; v is the number of steps done
//
// The rbegin/go handshake makes a register operation's recorded call time
// (taken by the parent before it answers go) no later than the Txn's real
// start, and its return time (taken when rend arrives) no earlier than the
// Txn's end, so the parent's clock brackets the child's operation. The
// probe/go handshake likewise makes a successful check's recorded time no
// later than the check itself: a lower bound on when the child believed;
// and the acall/go handshake an acquisition's call time no later than its
// Acquire's call.

// workerConfig is what a child needs to know.
type workerConfig struct {
	ID      int           `json:"id"`
	Conn    endpoint      `json:"conn"` // the child's way to the store
	Prefix  string        `json:"prefix"`
	Key     string        `json:"key"`
	RegKey  string        `json:"regKey"`
	TTL     time.Duration `json:"ttl"`
	Fair    bool          `json:"fair"`
	MinHold time.Duration `json:"minHold"`
	MaxHold time.Duration `json:"maxHold"`
	Seed    uint64        `json:"seed"`
	// Workload is wlMutex, wlPermits (Key is then a counted lock of
	// Permits) or wlTransfer (each hold a LockAll on some of Accounts).
	Workload string   `json:"workload,omitempty"`
	Permits  int      `json:"permits,omitempty"`
	Accounts []string `json:"accounts,omitempty"`
	// Late, for wlElection (Key is then the election), makes a leader go
	// on writing for that long after its term's context ended (the
	// negative control).
	Late time.Duration `json:"late,omitempty"`
	// LateBelief, for wlElection, makes a leader's probes go on reporting
	// that it leads for that long after its term's context ended, and
	// lead wait meanwhile (the negative control of the leaders' probes).
	LateBelief time.Duration `json:"lateBelief,omitempty"`
	// Unguarded makes the child's register Txns carry a comparison that
	// always holds instead of its guard's ownership comparison (the
	// negative control of the register check).
	Unguarded bool `json:"unguarded,omitempty"`
	// Session makes the child take the mutex workload's lock with etcd's
	// concurrency.Mutex and trust its session until Done closes (the
	// negative control of the children's checks).
	Session bool `json:"session,omitempty"`
}

type message struct {
	T        string        `json:"t"`
	ID       uint64        `json:"id,omitempty"`
	Token    uint64        `json:"tok,omitempty"`
	Value    int64         `json:"v,omitempty"`
	Tag      string        `json:"tag,omitempty"`
	Kind     string        `json:"k,omitempty"`
	Status   string        `json:"s,omitempty"`
	OK       bool          `json:"ok,omitempty"`
	StampW   int64         `json:"sw,omitempty"`
	StampL   uint32        `json:"sl,omitempty"`
	HasStamp bool          `json:"hs,omitempty"`
	Config   *workerConfig `json:"cfg,omitempty"`
	Res      string        `json:"res,omitempty"`
	Permit   int           `json:"p,omitempty"`
	Keys     []string      `json:"keys,omitempty"`
	Values   []int64       `json:"vs,omitempty"`
}

// pipe is one end of the pipe pair. send is safe for concurrent use;
// recv must be called from one goroutine.
type pipe struct {
	mu  sync.Mutex
	w   io.Writer
	enc *json.Encoder
	r   *bufio.Scanner
}

func newPipe(r io.Reader, w io.Writer) *pipe {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	return &pipe{w: w, enc: json.NewEncoder(w), r: sc}
}

func (c *pipe) send(m message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enc.Encode(m)
}

// recv returns the next message, or io.EOF when the other side is gone.
func (c *pipe) recv() (message, error) {
	if !c.r.Scan() {
		if err := c.r.Err(); err != nil {
			return message{}, err
		}
		return message{}, io.EOF
	}
	var m message
	if err := json.Unmarshal(c.r.Bytes(), &m); err != nil {
		return message{}, fmt.Errorf("bad message %q: %w", c.r.Text(), err)
	}
	return m, nil
}

func statusName(s status) string { return s.String() }

func parseStatus(s string) status {
	switch s {
	case "ok":
		return statusOK
	case "stale":
		return statusStale
	}
	return statusUnknown
}
