package ashlock

import "context"

// guardContext is the context Do and Election.Run hand to their function:
// cancelled, with cause ErrLeaseExpired, the moment the guard ends. The
// watchdog's timer cancels it at the local deadline, but a process that
// resumes from a pause longer than its lease runs its goroutines in no set
// order, so the function could look at its context before that timer has
// fired. Err therefore checks the guard's deadline itself and, if it has
// passed, cancels the context before answering: a function that checks
// Err before acting never acts past the deadline, and Done is closed by
// the time Err reports the end, as the context contract requires.
// Contexts derived from it are cancelled with it but check no deadline of
// their own.
type guardContext struct {
	context.Context
	cancel context.CancelCauseFunc
	s      *guardState
}

func newGuardContext(parent context.Context, s *guardState) (*guardContext, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	return &guardContext{Context: ctx, cancel: cancel, s: s}, cancel
}

// Err returns the context's error, after ending it if the guard is no
// longer valid by the local clock.
func (c *guardContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if _, err := c.s.check(); err != nil {
		c.cancel(err)
	}
	return c.Context.Err()
}
