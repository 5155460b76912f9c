package groupstate

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Judge says of a live entry whether its process is dead, and its host pid
// where it was found meanwhile (0: not).
type Judge func(p Process) (dead bool, hostPID int32)

// Reap frees the entries of dead members and releases the memory they still
// hold, under the file's lock (waiting at most wait; ErrLocked past it), as
// the library does before a refusal. judge gets every live entry first (to scan
// once) and returns the judge of each. It returns how many entries it freed.
func Reap(path string, wait time.Duration, judge func([]Process) Judge) (reaped int, err error) {
	defer GuardFault(&err)()
	s, err := Open(path, false, wait)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	if err := s.Check(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var ps []Process // entries change only under the lock we hold
	s.Procs(func(_ int, p Process) bool { ps = append(ps, p); return true })
	dead := judge(ps)
	s.Procs(func(off int, p Process) bool {
		gone, hostPID := dead(p)
		if hostPID > 0 { // found by a scan: later passes need none
			atomic.StoreUint32(s.U32(off+ProcOffHostPID), uint32(hostPID))
		}
		if !gone {
			return true
		}
		for g := range MaxGPUs {
			held := atomic.SwapUint64(s.U64(off+ProcOffUsed+8*g), 0)
			if held != 0 {
				subSaturating(s.U64(GPUsOffset+g*GPUSize+GPUOffUsed), held)
			}
		}
		atomic.StoreUint32(s.U32(off), ProcFree)
		reaped++
		return true
	})
	return reaped, nil
}

// subSaturating subtracts n from *v, stopping at 0 (as the library does).
func subSaturating(v *uint64, n uint64) {
	for {
		old := atomic.LoadUint64(v)
		next := uint64(0)
		if old > n {
			next = old - n
		}
		if atomic.CompareAndSwapUint64(v, old, next) {
			return
		}
	}
}
