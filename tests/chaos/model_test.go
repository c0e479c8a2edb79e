package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// regState is the state of a fenced register: its value and the highest
// token of an operation that took effect.
type regState struct {
	value int64
	mark  uint64
}

// fencedRegister is the sequential specification both registers are
// checked against. An operation takes effect only with a token at least the
// mark, and raises the mark to its token: once a holder with a higher token
// has read or written, no lower token's operation may take effect again.
// For a lock that is the observable form of mutual exclusion; for a fenced
// resource it is what the fence promises.
//
// strictStale says when a refusal is allowed. The external resource
// refuses exactly the tokens below the mark, so a refusal of any other
// token is a violation too. The register in etcd refuses whenever the
// holder's claim is gone (its ownership comparison fails), which can happen
// before any later holder acted, so there a refusal is always allowed and
// has no effect.
func fencedRegister(strictStale bool) porcupine.Model {
	return fencedRegisterFrom(0, strictStale)
}

// fencedRegisterFrom is fencedRegister starting at value initial (an
// account's opening balance).
func fencedRegisterFrom(initial int64, strictStale bool) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return regState{value: initial} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(regState), input.(regInput), output.(regOutput)
			switch out.status {
			case statusOK:
				if in.token < s.mark {
					return false, s
				}
				next := regState{value: s.value, mark: in.token}
				if in.kind == opRead {
					return out.value == s.value, next
				}
				next.value = in.value
				return true, next
			case statusStale:
				return !strictStale || in.token < s.mark, s
			}
			// Unknown outcomes are resolved or dropped before checking.
			return false, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(regInput), output.(regOutput)
			if in.kind == opRead {
				return fmt.Sprintf("read[t%d] -> %s %d", in.token, out.status, out.value)
			}
			return fmt.Sprintf("write[t%d](%d) -> %s", in.token, in.value, out.status)
		},
		DescribeState: func(state any) string {
			s := state.(regState)
			return fmt.Sprintf("value %d, mark t%d", s.value, s.mark)
		},
	}
}

// checkTimeout bounds one linearizability check. Histories here are close
// to sequential (one lock holder at a time), so a check takes milliseconds;
// a check that runs out of time is reported, never taken as a pass.
const checkTimeout = 3 * time.Minute

// linearizable checks ops against the model. On a violation it writes
// porcupine's visualization next to the other temporary files and returns
// its path.
func linearizable(name string, model porcupine.Model, ops []op) (porcupine.CheckResult, string) {
	res, info := porcupine.CheckOperationsVerbose(model, operations(ops), checkTimeout)
	if res != porcupine.Illegal {
		return res, ""
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("ashlock-chaos-%s-%d.html", name, time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return res, "visualization failed: " + err.Error()
	}
	return res, path
}

// applied is a write the store applied, in the store's order.
type applied struct {
	value int64
	tag   string
}

// resolve settles the writes whose answer never came, using the store's
// record of what it applied: a write found there took effect (it may have
// returned at any time after its call); one not found had no effect and is
// dropped, as are unanswered reads. It also reports writes whose answer
// contradicts the record.
func resolve(ops []op, record []applied) (out []op, problems []string) {
	inRecord := make(map[string]bool, len(record))
	for _, a := range record {
		inRecord[a.tag] = true
	}
	for _, o := range ops {
		if o.in.kind == opRead {
			if o.out.status != statusUnknown {
				out = append(out, o)
			}
			continue
		}
		switch {
		case o.out.status == statusUnknown && inRecord[o.in.tag]:
			o.out.status, o.ret = statusOK, never
			out = append(out, o)
		case o.out.status == statusUnknown:
			// Never applied: no effect, nothing to check.
		case o.out.status == statusOK && !inRecord[o.in.tag]:
			problems = append(problems, fmt.Sprintf("write %s acknowledged but not in the store's record", o.in.tag))
		case o.out.status == statusStale && inRecord[o.in.tag]:
			problems = append(problems, fmt.Sprintf("write %s refused but in the store's record", o.in.tag))
		default:
			out = append(out, o)
		}
	}
	return out, problems
}

// lostUpdates checks that every applied write built on the one before it:
// each holder reads the register and writes the value plus one, so in the
// store's order the values must run 1, 2, 3, ... An applied write that the
// next one did not build on was lost. It returns the number of lost
// updates and how many of them had been acknowledged to their writer.
func lostUpdates(record []applied, ops []op) (lost, lostAcked int) {
	acked := make(map[string]bool)
	for _, o := range ops {
		if o.in.kind == opWrite && o.out.status == statusOK {
			acked[o.in.tag] = true
		}
	}
	prev := int64(0)
	for i, a := range record {
		if a.value != prev+1 {
			lost++
			if i > 0 && acked[record[i-1].tag] {
				lostAcked++
			}
		}
		prev = a.value
	}
	return lost, lostAcked
}
