package ashlock

import (
	"testing"
	"unsafe"
)

// Every acquisition allocates a Guard, and the allocation and the GC work
// it causes are a large part of an uncontended cycle: keep it within the
// 176-byte size class.
func TestGuardSize(t *testing.T) {
	if size := unsafe.Sizeof(guardState{}); size > 176 {
		t.Errorf("guardState is %d bytes, want at most 176", size)
	}
}
