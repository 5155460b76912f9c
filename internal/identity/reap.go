package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/groupstate"
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
func memberLiveness(procRoot string, ourNS uint64, p groupstate.Process) liveness {
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

// PIDNS is the inode of procRoot/self's pid namespace.
func PIDNS(procRoot string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(procRoot+"/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("pid namespace: %w", err)
	}
	return st.Ino, nil
}

// ReapDead releases what dead members of a group state file still hold and
// frees their entries, under the file's lock, as the library does before a refusal:
// the daemon calls it on every status refresh, so a dead member's memory is
// uncounted well within a second of its exit even if no member allocates. A
// lock held past groupstate.BriefLockWait makes it return groupstate.ErrLocked (tried again at
// the next refresh).
// It returns how many entries it freed.
func ReapDead(procRoot, path string) (reaped int, err error) {
	ns, err := PIDNS(procRoot)
	if err != nil {
		return 0, err
	}
	return groupstate.Reap(path, groupstate.BriefLockWait, func(ps []groupstate.Process) groupstate.Judge {
		view := newLivenessView(procRoot, ns, ps)
		return func(p groupstate.Process) (bool, int32) {
			l, hostPID := view.of(p)
			return l == memberDead, hostPID
		}
	})
}

// LiveMembers counts the members of a group state file that may still run
// (dead ones do not count; members whose liveness cannot be decided do). A
// missing file has none.
func LiveMembers(procRoot, path string) (int, error) {
	ps, err := groupstate.Processes(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ns, err := PIDNS(procRoot)
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
