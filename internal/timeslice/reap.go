package timeslice

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Liveness of a group member, decided from /proc (start time guards against
// pid reuse).
type liveness int

const (
	memberLive liveness = iota
	memberDead
	memberUnknown // not decided (another pid namespace, not found in view)
)

// memberLiveness tells whether the process of entry p still runs, seen from
// procRoot, whose own pid namespace is ourNS (an entry of another namespace
// without a host pid is unknown here: livenessView looks for it).
func memberLiveness(procRoot string, ourNS uint64, p GroupProcess) liveness {
	pid := p.PID
	if p.PIDNS != ourNS {
		if p.HostPID <= 0 {
			return memberUnknown
		}
		pid = p.HostPID
	}
	stat, err := os.ReadFile(procRoot + "/" + strconv.Itoa(int(pid)) + "/stat")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return memberDead
	}
	if err != nil {
		return memberUnknown
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " Z") {
		return memberDead // a zombie holds no GPU memory
	}
	start, err := parseStartTime(stat)
	if err != nil {
		return memberUnknown
	}
	if start != p.StartTime {
		return memberDead // the pid was reused
	}
	return memberLive
}

// pidNS is the inode of procRoot/self's pid namespace.
func pidNS(procRoot string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(procRoot+"/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("pid namespace: %w", err)
	}
	return st.Ino, nil
}

// ReapDead releases what dead members of a group state file still hold and
// frees their entries, under the file's lock, as the library does on attach:
// the daemon calls it on every status refresh, so a dead member's memory is
// uncounted well within a second of its exit even if no member allocates. A
// lock held past reapLockWait makes it return errStateLocked (tried again at
// the next refresh).
// It returns how many entries it freed.
func ReapDead(procRoot, path string) (reaped int, err error) {
	defer guardFault(&err)()
	ns, err := pidNS(procRoot)
	if err != nil {
		return 0, err
	}
	s, err := openState(path, false, reapLockWait)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if err := s.check(); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var ps []GroupProcess // entries change only under the lock we hold
	s.procs(func(_ int, p GroupProcess) bool { ps = append(ps, p); return true })
	view := newLivenessView(procRoot, ns, ps)
	s.procs(func(off int, p GroupProcess) bool {
		l, hostPID := view.of(p)
		if hostPID > 0 { // found by the scan: later passes need none
			atomic.StoreUint32(s.u32(off+shmProcOffHost), uint32(hostPID))
		}
		if l != memberDead {
			return true
		}
		for g := range shmMaxGPUs {
			held := atomic.SwapUint64(s.u64(off+shmProcOffUsed+8*g), 0)
			if held != 0 {
				subSaturating(s.u64(shmHeaderSize+g*shmGPUSize+shmGPUOffUsed), held)
			}
		}
		atomic.StoreUint32(s.u32(off), 0)
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

// LiveMembers counts the members of a group state file that may still run
// (dead ones do not count; members whose liveness cannot be decided do). A
// missing file has none.
func LiveMembers(procRoot, path string) (int, error) {
	ps, err := GroupProcesses(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ns, err := pidNS(procRoot)
	if err != nil {
		return 0, err
	}
	view := newLivenessView(procRoot, ns, ps)
	n := 0
	for _, p := range ps {
		if l, _ := view.of(p); l != memberDead {
			n++
		}
	}
	return n, nil
}
