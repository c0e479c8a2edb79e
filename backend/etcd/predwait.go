package etcd

// predWait is the target of the watch a fair or non-queued waiter keeps on
// the claim it waits behind (see waitDeleted). It only needs to know that
// the claim is gone or that the watch failed: the mux closes the gap
// between the waiter's read and the watch's start itself (watchcheck.go).
type predWait struct {
	done chan struct{} // closed by keyDeleted or watchFailed
	err  error         // written before done is closed: why the watch failed
}

func newPredWait() *predWait { return &predWait{done: make(chan struct{})} }

// watchCreated implements watchTarget; the waiter has nothing to do.
func (p *predWait) watchCreated(int64) {}

// keyDeleted and watchFailed implement watchTarget. The mux makes at most
// one of these two calls per watch.
func (p *predWait) keyDeleted(int64)      { close(p.done) }
func (p *predWait) watchFailed(err error) { p.err = err; close(p.done) }
