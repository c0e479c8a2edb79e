package fencing_test

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ash-lock/ashlock/fencing"
)

func ExampleValidateWrite() {
	// The highest token the resource has accepted so far.
	const highest = 7
	fmt.Println(fencing.ValidateWrite(7, highest)) // the current holder
	fmt.Println(fencing.ValidateWrite(8, highest)) // a newer holder: accept, then raise the mark to 8
	fmt.Println(fencing.ValidateWrite(6, highest)) // a holder whose lock has since passed on
	// Output:
	// true
	// true
	// false
}

func ExampleFence_Admit() {
	var f fencing.Fence // ready to use

	fmt.Println(f.Admit("orders/42", 7)) // first holder
	fmt.Println(f.Admit("orders/42", 8)) // next holder raises the mark
	err := f.Admit("orders/42", 7)       // first holder again, too late
	fmt.Println(errors.Is(err, fencing.ErrStaleToken))

	var stale *fencing.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println(stale.Token, "refused, mark is", stale.Highest)
	}
	fmt.Println(f.Highest("orders/42"))
	// Output:
	// <nil>
	// <nil>
	// true
	// 7 refused, mark is 8
	// 8
}

// Readers of a shared lock hold tokens of their own, and may reach the
// resource in any order: AdmitShared lets them all through, while a writer
// older than any of them, or a reader older than the last writer, is
// refused.
func ExampleFence_AdmitShared() {
	var f fencing.Fence

	fmt.Println(f.Admit("report", 5))       // writer
	fmt.Println(f.AdmitShared("report", 9)) // a reader queued after it
	fmt.Println(f.AdmitShared("report", 8)) // another reader, arriving late: fine
	err := f.Admit("report", 7)             // a writer older than the readers
	fmt.Println(errors.Is(err, fencing.ErrStaleToken))
	fmt.Println(f.Admit("report", 12)) // the next writer
	err = f.AdmitShared("report", 9)   // the old reader, after it
	fmt.Println(errors.Is(err, fencing.ErrStaleToken))
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// true
	// <nil>
	// true
}

// account is a resource that fences every request, reads included.
type account struct {
	mu      sync.Mutex // makes each check and the access it guards one step
	fence   fencing.Fence
	balance int
}

func (a *account) read(token uint64) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Admitting the read raises the mark, so an older holder's pending
	// write can no longer land between this read and the write after it.
	if err := a.fence.Admit("balance", token); err != nil {
		return 0, err
	}
	return a.balance, nil
}

func (a *account) write(token uint64, balance int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.fence.Admit("balance", token); err != nil {
		return err
	}
	a.balance = balance
	return nil
}

// Two clients each add to a balance with a read-modify-write. Client A
// (token 7) is paused between its read and its write, long enough for its
// lock to pass to client B (token 8). Because B's read is fenced, A's late
// write is refused instead of being silently overwritten by B's.
func Example_fencedReadModifyWrite() {
	acct := &account{balance: 100}

	a, _ := acct.read(7) // A reads 100, then stalls
	b, _ := acct.read(8) // A's lease expired; B holds the lock and reads 100

	err := acct.write(7, a+10) // A wakes up and writes
	fmt.Println("A:", err)

	err = acct.write(8, b+20)
	fmt.Println("B:", err)

	// A starts over under a new acquisition (token 9) from a fresh read.
	a, _ = acct.read(9)
	fmt.Println("A retry:", acct.write(9, a+10))
	fmt.Println("balance:", acct.balance)
	// Output:
	// A: fencing: stale token 7 for resource "balance": token 8 already admitted
	// B: <nil>
	// A retry: <nil>
	// balance: 130
}
