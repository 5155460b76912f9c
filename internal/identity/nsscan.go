package identity

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// A member in a pid namespace other than the daemon's whose host pid was
// never written (its hello failed, say while the daemon restarted) is found
// from the kernel: one scan of procRoot per reap pass, only when some entry
// needs it, looks for the process whose /proc/<pid>/ns/pid is the entry's
// namespace and whose innermost NSpid is the entry's pid. Absence proves the
// member dead only when the scan read everything (the reader sees init and
// every process it listed) and the namespace is in view: some process of it
// was seen, or procRoot's namespace is the initial one, which sees them all.

// initPIDNS is the inode of the initial pid namespace (the kernel's
// PROC_PID_INIT_INO, fixed since Linux 3.8).
const initPIDNS = 0xEFFFFFFC

// nsKey names a process by its pid namespace and its pid in it.
type nsKey struct {
	NS  uint64
	PID int32
}

// nsProc is a process of a wanted namespace as a scan of procRoot saw it.
type nsProc struct {
	HostPID int32 // its pid in procRoot's namespace
	NS      uint64
	NSPID   int32 // innermost NSpid value
}

// nsIndex is what one scan tells about the namespaces some entries name.
type nsIndex struct {
	hostPID  map[nsKey]int32
	seen     map[uint64]bool // namespaces with at least one process
	complete bool            // nothing listed was left unread
	all      bool            // procRoot's namespace is the initial one
}

// indexNS indexes the processes a scan found.
func indexNS(procs []nsProc, complete, all bool) nsIndex {
	ix := nsIndex{hostPID: make(map[nsKey]int32, len(procs)), seen: map[uint64]bool{}, complete: complete, all: all}
	for _, p := range procs {
		ix.hostPID[nsKey{p.NS, p.NSPID}] = p.HostPID
		ix.seen[p.NS] = true
	}
	return ix
}

// locate returns the host pid of the process of entry p's namespace with
// p's pid (found), or whether its absence proves p dead.
func (ix nsIndex) locate(p groupstate.Process) (hostPID int32, found, dead bool) {
	if hp, ok := ix.hostPID[nsKey{p.PIDNS, p.PID}]; ok {
		return hp, true, false
	}
	return 0, false, ix.complete && (ix.all || ix.seen[p.PIDNS])
}

// needsScan: entry p is in another pid namespace and has no host pid yet.
func needsScan(ourNS uint64, p groupstate.Process) bool {
	return p.PIDNS != ourNS && p.HostPID <= 0
}

// gone reports an error that means the process has exited.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// scanNS lists the processes of procRoot in the namespaces of want, and
// whether it could read everything it listed. Bounded by the number of
// processes: one stat each, a status file each for those of want (and for
// those whose namespace cannot be read, to rule them out by pid).
func scanNS(procRoot string, want map[uint64]bool, wantPID map[int32]bool) (out []nsProc, complete bool, err error) {
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, false, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	complete, sawInit := true, false
	for {
		names, rerr := d.Readdirnames(512)
		for _, name := range names {
			pid, perr := strconv.ParseInt(name, 10, 32)
			if perr != nil || pid <= 0 {
				continue
			}
			p, ok, readAll := scanOne(procRoot+"/"+name, int32(pid), want, wantPID)
			complete = complete && readAll
			sawInit = sawInit || (pid == 1 && readAll)
			if ok {
				out = append(out, p)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, false, rerr
		}
	}
	return out, complete && sawInit, nil
}

// scanOne reads process dir: ok if it is in a wanted namespace, readAll
// unless something that could matter could not be read (gone is read).
func scanOne(dir string, pid int32, want map[uint64]bool, wantPID map[int32]bool) (p nsProc, ok, readAll bool) {
	var st unix.Stat_t
	err := unix.Stat(dir+"/ns/pid", &st)
	if gone(err) {
		return p, false, true
	}
	if err == nil && !want[st.Ino] {
		return p, false, true
	}
	// In a wanted namespace, or its namespace unreadable (no ptrace access):
	// its NSpid (world-readable) says whether it could be a wanted member.
	// NSpid lists the pids from procRoot's namespace down to the process's.
	status, serr := os.ReadFile(dir + "/status")
	if gone(serr) {
		return p, false, true
	}
	if serr != nil {
		return p, false, false
	}
	ids, perr := ParseNSpid(status)
	if perr != nil {
		return p, false, false
	}
	inner := ids[len(ids)-1]
	if err != nil { // one NSpid: in procRoot's own namespace, wanted by none
		return p, false, len(ids) == 1 || !wantPID[inner]
	}
	var again unix.Stat_t // the same process still (a reused pid has another)
	if err := unix.Stat(dir+"/ns/pid", &again); err != nil || again.Ino != st.Ino {
		return p, false, gone(err)
	}
	return nsProc{HostPID: pid, NS: st.Ino, NSPID: inner}, true, true
}

// livenessView decides members' liveness seen from procRoot (pid namespace
// ourNS), with one scan for the entries that need it.
type livenessView struct {
	procRoot string
	ourNS    uint64
	ix       nsIndex
}

// newLivenessView scans procRoot if some entry of ps needs it.
func newLivenessView(procRoot string, ourNS uint64, ps []groupstate.Process) livenessView {
	v := livenessView{procRoot: procRoot, ourNS: ourNS}
	want, wantPID := map[uint64]bool{}, map[int32]bool{}
	for _, p := range ps {
		if needsScan(ourNS, p) {
			want[p.PIDNS], wantPID[p.PID] = true, true
		}
	}
	if len(want) == 0 {
		return v
	}
	procs, complete, err := scanNS(procRoot, want, wantPID)
	v.ix = indexNS(procs, complete && err == nil, ourNS == initPIDNS)
	return v
}

// of returns entry p's liveness and, for a live member found by the scan,
// its host pid (0 otherwise).
func (v livenessView) of(p groupstate.Process) (liveness, int32) {
	if !needsScan(v.ourNS, p) {
		return memberLiveness(v.procRoot, v.ourNS, p), 0
	}
	hp, found, dead := v.ix.locate(p)
	switch {
	case dead:
		return memberDead, 0
	case !found:
		return memberUnknown, 0
	}
	p.HostPID = hp
	l := memberLiveness(v.procRoot, v.ourNS, p)
	if l != memberLive {
		return l, 0
	}
	return l, hp
}
