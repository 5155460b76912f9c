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

// seenEntry is a live entry as Reap's first pass read it.
type seenEntry struct {
	off int
	p   Process
}

// Reap frees the entries of dead members and releases the memory they still
// hold, under the file's lock (waiting at most wait; ErrLocked past it), as
// the library does before a refusal. judge gets every live entry first (to scan
// once) and returns the judge of each. Only the entries judge was given are
// judged, each only while it is still the same process at the same place
// (live, same pid, pid namespace and start time): an entry that became live
// after the first pass, or was freed and taken by another process, is left
// alone. An entry left ProcClaiming (its claimer died mid-claim: claimers hold
// the lock shared, so none fills one in while we hold it) is freed too. It
// returns how many entries it freed.
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
	return s.reap(judge), nil
}

// reap is Reap on a mapped, locked and checked file.
func (s *State) reap(judge func([]Process) Judge) (reaped int) {
	var seen []seenEntry
	var ps []Process
	s.Procs(func(off int, p Process) bool {
		seen = append(seen, seenEntry{off, p})
		ps = append(ps, p)
		return true
	})
	dead := judge(ps)
	for _, e := range seen {
		if now, ok := s.procAt(e.off); !ok || !sameProcess(now, e.p) {
			continue // changed since the first pass: not the entry judge was given
		}
		gone, hostPID := dead(e.p)
		if hostPID > 0 { // found by a scan: later passes need none
			atomic.StoreUint32(s.U32(e.off+ProcOffHostPID), uint32(hostPID))
		}
		if gone {
			s.freeProc(e.off)
			reaped++
		}
	}
	base := HeaderSize + MaxGPUs*GPUSize
	for i := range MaxProcs {
		off := base + i*ProcSize
		if atomic.LoadUint32(s.U32(off)) == ProcClaiming {
			s.freeProc(off)
			reaped++
		}
	}
	return reaped
}

// procAt reads the entry at off: its process, and whether it is live.
func (s *State) procAt(off int) (Process, bool) {
	if atomic.LoadUint32(s.U32(off)) != ProcLive {
		return Process{}, false
	}
	return Process{PID: int32(atomic.LoadUint32(s.U32(off + ProcOffPID))),
		HostPID:   int32(atomic.LoadUint32(s.U32(off + ProcOffHostPID))),
		StartTime: atomic.LoadUint64(s.U64(off + ProcOffStart)), PIDNS: atomic.LoadUint64(s.U64(off + ProcOffPIDNS))}, true
}

// sameProcess: a and b name one process (the host pid may have been filled in between).
func sameProcess(a, b Process) bool {
	return a.PID == b.PID && a.PIDNS == b.PIDNS && a.StartTime == b.StartTime
}

// freeProc releases what the entry at off holds and frees it.
func (s *State) freeProc(off int) {
	for g := range MaxGPUs {
		held := atomic.SwapUint64(s.U64(off+ProcOffUsed+8*g), 0)
		if held != 0 {
			subSaturating(s.U64(GPUsOffset+g*GPUSize+GPUOffUsed), held)
		}
	}
	atomic.StoreUint32(s.U32(off), ProcFree)
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
