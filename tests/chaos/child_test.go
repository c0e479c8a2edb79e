package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// childTimeout bounds a child's start and stop.
const childTimeout = 30 * time.Second

// child is the parent's side of a holder running in a child process. A
// goroutine serves the child's messages: it records acquisitions and
// register operations on the run's clock and answers resource requests.
type child struct {
	id       int
	workload string
	cmd      *exec.Cmd
	io       *pipe
	route    route

	res     *resource
	pool    *pool     // the permits workload's registers
	bank    *bank     // the transfer workload's accounts
	elReg   *resource // the election workload's register
	regHist *history
	acqs    *acquisitions
	clk     clock
	onAcq   func(holder int)
	onRead  func(holder int) // after the child was answered a read

	stderr lockedBuffer
	ready  chan struct{} // closed on "ready"
	gone   chan struct{} // closed when the child's stdout ends
	exited chan struct{} // closed when the process has been waited for
	exitE  error

	// Election leaders' writes after their term's context ended (the
	// negative control), and how many of them the register admitted.
	late, lateAdmitted atomic.Int64
	// Election leaders' probes that reported belief after their term's
	// context ended (the negative control of the leaders' probes).
	lateBeliefs atomic.Int64

	steps  atomic.Int64 // from "bye"
	bye    atomic.Bool
	frozen atomic.Bool
	bad    atomic.Value // first protocol problem, a string
}

// pendingOp is a register operation between rbegin and rend.
type pendingOp struct {
	in   regInput
	call int64
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startChild re-executes the test binary as a worker and waits until it is
// connected to the store.
func startChild(ch *child, cfg workerConfig) error {
	ch.ready = make(chan struct{})
	ch.gone = make(chan struct{})
	ch.exited = make(chan struct{})
	ch.cmd = exec.Command(os.Args[0])
	ch.cmd.Env = append(os.Environ(), workerEnv+"=1")
	ch.cmd.Stderr = &ch.stderr
	stdin, err := ch.cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := ch.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := ch.cmd.Start(); err != nil {
		return err
	}
	ch.io = newPipe(stdout, stdin)
	go ch.serve()
	go func() {
		<-ch.gone // Wait must not run before the reads of stdout are done
		ch.exitE = ch.cmd.Wait()
		close(ch.exited)
	}()
	if err := ch.io.send(message{T: "cfg", Config: &cfg}); err != nil {
		return errors.Join(err, ch.kill())
	}
	select {
	case <-ch.ready:
		return nil
	case <-ch.gone:
		return fmt.Errorf("child %d exited before it was ready: %s", ch.id, ch.stderr.String())
	case <-time.After(childTimeout):
		return errors.Join(fmt.Errorf("child %d not ready within %v", ch.id, childTimeout), ch.kill())
	}
}

func (ch *child) problem(format string, args ...any) {
	ch.bad.CompareAndSwap(nil, fmt.Sprintf(format, args...))
}

// serve handles the child's messages until its stdout ends.
func (ch *child) serve() {
	defer close(ch.gone)
	pending := make(map[uint64]pendingOp)
	probes := make(map[uint64]int64) // probe ID -> the check's time
	var cur *acquisition             // the child's latest acquisition
	var called int64                 // the call time of the child's pending Acquire; 0 if none
	for {
		m, err := ch.io.recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				ch.problem("child %d: %v", ch.id, err)
			}
			return
		}
		switch m.T {
		case "ready":
			close(ch.ready)
		case "acall":
			// The time is taken before the child may call Acquire.
			called = ch.clk.now()
			ch.answer(message{T: "go", ID: m.ID})
		case "acq":
			cur = &acquisition{holder: ch.id, token: m.Token, returned: ch.clk.now(),
				stampW: m.StampW, stampL: m.StampL, hasStamp: m.HasStamp, permit: m.Permit, keys: m.Keys, called: called}
			called = 0
			ch.acqs.add(cur)
			ch.onAcq(ch.id)
		case "probe":
			// The time is taken before the child may check its guard.
			probes[m.ID] = ch.clk.now()
			ch.answer(message{T: "go", ID: m.ID})
		case "probed":
			at, ok := probes[m.ID]
			delete(probes, m.ID)
			if !ok || cur == nil {
				ch.problem("child %d: probed %d without probe or acquisition", ch.id, m.ID)
				continue
			}
			ch.acqs.update(cur, func(a *acquisition) {
				if m.OK {
					a.probed = true
					a.believed = max(a.believed, at)
				}
				if m.OK && m.Kind == probeAfterDone {
					a.doneButValid++
				}
				if !m.OK && ch.workload == wlElection {
					// lead's context ended while lead ran: the term was
					// lost, not resigned (for the closest call).
					a.lost = true
				}
			})
			if m.OK && m.Kind == probeLate {
				ch.lateBeliefs.Add(1)
			}
		case "rread":
			r := ch.resource(m.Res)
			if r == nil {
				ch.answer(message{T: "res", ID: m.ID})
				continue
			}
			v, ok := r.read(ch.id, m.Token)
			ch.answer(message{T: "res", ID: m.ID, OK: ok, Value: v})
			if ok {
				ch.onRead(ch.id)
			}
		case "rwrite":
			r := ch.resource(m.Res)
			if r == nil {
				ch.answer(message{T: "res", ID: m.ID})
				continue
			}
			ok := r.write(ch.id, m.Token, m.Value, m.Tag)
			ch.answer(message{T: "res", ID: m.ID, OK: ok})
			if m.Kind == lateWrite {
				ch.late.Add(1)
				if ok {
					ch.lateAdmitted.Add(1)
				}
			}
		case "tread":
			vs, ok := ch.bank.read(ch.id, m.Token, m.Keys)
			ch.answer(message{T: "res", ID: m.ID, OK: ok, Values: vs})
			if ok {
				ch.onRead(ch.id)
			}
		case "twrite":
			ok := ch.bank.write(ch.id, m.Token, m.Keys, m.Values, m.Tag)
			ch.answer(message{T: "res", ID: m.ID, OK: ok})
		case "rbegin":
			in := regInput{kind: opRead, token: m.Token}
			if m.Kind == "write" {
				in = regInput{kind: opWrite, token: m.Token, value: m.Value, tag: m.Tag}
			}
			// The call time is taken before the child may start the Txn.
			pending[m.ID] = pendingOp{in: in, call: ch.clk.now()}
			ch.answer(message{T: "go", ID: m.ID})
		case "rend":
			p, ok := pending[m.ID]
			if !ok {
				ch.problem("child %d: rend %d without rbegin", ch.id, m.ID)
				continue
			}
			delete(pending, m.ID)
			ch.regHist.add(op{holder: ch.id, in: p.in, out: regOutput{status: parseStatus(m.Status), value: m.Value}, call: p.call, ret: ch.clk.now()})
			if p.in.kind == opRead && parseStatus(m.Status) == statusOK {
				ch.onRead(ch.id)
			}
		case "bye":
			ch.steps.Store(m.Value)
			ch.bye.Store(true)
		default:
			ch.problem("child %d: unknown message %q", ch.id, m.T)
		}
	}
}

// resource returns the resource a child's rread or rwrite names: the
// mutex workload's for "", the election's register, else a permit's
// register. An unknown name is a protocol problem.
func (ch *child) resource(name string) *resource {
	if name == "" {
		return ch.res
	}
	if ch.elReg != nil && name == ch.elReg.name {
		return ch.elReg
	}
	if r := ch.pool.byName(name); r != nil {
		return r
	}
	ch.problem("child %d: no resource %q", ch.id, name)
	return nil
}

func (ch *child) answer(m message) {
	if err := ch.io.send(m); err != nil {
		ch.problem("child %d: answer: %v", ch.id, err)
	}
}

// stop asks the child to finish and waits for it to exit.
func (ch *child) stop() error {
	if err := ch.thaw(); err != nil {
		return err
	}
	if err := ch.io.send(message{T: "stop"}); err != nil {
		return errors.Join(fmt.Errorf("child %d: send stop: %w", ch.id, err), ch.kill())
	}
	select {
	case <-ch.exited:
	case <-time.After(childTimeout):
		return errors.Join(fmt.Errorf("child %d did not exit within %v", ch.id, childTimeout), ch.kill())
	}
	var errs []error
	if ch.exitE != nil {
		errs = append(errs, fmt.Errorf("child %d: %w; stderr:\n%s", ch.id, ch.exitE, ch.stderr.String()))
	}
	if !ch.bye.Load() {
		errs = append(errs, fmt.Errorf("child %d exited without saying bye", ch.id))
	}
	if p := ch.bad.Load(); p != nil {
		errs = append(errs, errors.New(p.(string)))
	}
	return errors.Join(errs...)
}

// kill ends the child for good and waits for it.
func (ch *child) kill() error {
	_ = ch.cmd.Process.Kill()
	select {
	case <-ch.exited:
		return nil
	case <-time.After(childTimeout):
		return fmt.Errorf("child %d: not reaped within %v of SIGKILL", ch.id, childTimeout)
	}
}

// freeze stops the child's process with SIGSTOP.
func (ch *child) freeze() error {
	if err := signalStop(ch.cmd.Process); err != nil {
		return err
	}
	ch.frozen.Store(true)
	return nil
}

// thaw resumes a frozen child with SIGCONT; it does nothing otherwise.
func (ch *child) thaw() error {
	if !ch.frozen.Swap(false) {
		return nil
	}
	return signalCont(ch.cmd.Process)
}
