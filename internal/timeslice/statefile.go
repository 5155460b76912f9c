package timeslice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
)

// The rest of the group state file layout (shm.h version 1) beyond
// memstate.go: the whole header and the process table. TestStateFileLayout
// checks them against a C build of the header.
const (
	shmMaxProcs     = 1024
	shmProcSize     = 160
	shmFileSize     = shmHeaderSize + shmMaxGPUs*shmGPUSize + shmMaxProcs*shmProcSize
	shmOffFileSize  = 16
	shmOffMaxProcs  = 28
	shmOffProcSize  = 36
	shmOffProcOff   = 48
	shmOffHostPIDNS = 56
	shmOffGroup     = 64
	shmNameLen      = 64
	shmProcLive     = 1
	shmProcOffPID   = 4
	shmProcOffHost  = 8
	shmProcOffStart = 16
	shmProcOffNS    = 24
	shmProcOffUsed  = 32
)

// GroupProcess is one live process of a group state file.
type GroupProcess struct {
	PID       int32  // in the process's own pid namespace
	HostPID   int32  // as NVML names it; 0 = not known yet
	StartTime uint64 // /proc/<pid>/stat field 22
	PIDNS     uint64 // inode of its pid namespace
}

// errTruncated: a state file shrank under its mapping (anyone who can write
// it can truncate it); the access faulted and was turned into this error.
var errTruncated = errors.New("group state file truncated while in use")

// guardFault turns a memory fault while the caller touches a mapped state
// file into errTruncated in *err instead of a crash of the daemon. Use as
// `defer guardFault(&err)()` in functions that access a mapping.
func guardFault(err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if re, ok := r.(interface{ Addr() uintptr }); ok && re != nil {
				*err = errors.Join(*err, errTruncated)
				return
			}
			panic(r)
		}
	}
}

// stateFile is a mapped group state file, locked against the library's
// processes (an open-file-description lock, which conflicts with their
// fcntl record locks, and not with other goroutines' own descriptions).
type stateFile struct {
	f *os.File
	b []byte
}

// How long the daemon and the node agent wait for a group state file's lock.
// Its members take it for a moment (attach, a slot claimed), but any of them,
// or the container the file is mounted into, may hold it for ever: nothing of
// ours waits for it unbounded (a refresh would stop for every group).
const (
	stateLockWait = time.Second           // host pids, a state made, members listed
	reapLockWait  = 10 * time.Millisecond // the daemon's refresh and settings: a busy file is tried again at the next refresh
)

// errStateLocked is returned when a group state file's lock stayed taken.
var errStateLocked = errors.New("group state file locked by another process")

// lockState takes f's write lock (an open file description lock, as the
// library's), waiting at most wait.
func lockState(f *os.File, path string, wait time.Duration) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	deadline := time.Now().Add(wait)
	for pause := 100 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES):
			return fmt.Errorf("lock %s: %w", path, err)
		case time.Now().After(deadline):
			return fmt.Errorf("%w: %s, for over %v", errStateLocked, path, wait)
		}
		time.Sleep(pause)
	}
}

// openState opens, locks (waiting at most wait) and maps path. create makes
// it (mode 0666) if missing; an empty file is then sized, and init fills it.
func openState(path string, create bool, wait time.Duration) (*stateFile, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := group.OpenFile(path, flags, 0o666)
	if err != nil {
		return nil, err
	}
	s := &stateFile{f: f}
	if err := lockState(f, path, wait); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	st, err := f.Stat()
	if err == nil && st.Size() == 0 && create {
		err = f.Truncate(shmFileSize)
	} else if err == nil && st.Size() != shmFileSize {
		err = fmt.Errorf("%w: %d bytes, want %d", errShm, st.Size(), shmFileSize)
	}
	if err == nil {
		s.b, err = unix.Mmap(int(f.Fd()), 0, shmFileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", path, err), s.close())
	}
	return s, nil
}

// close unmaps, unlocks and closes.
func (s *stateFile) close() error {
	var err error
	if s.b != nil {
		err = unix.Munmap(s.b)
	}
	return errors.Join(err, s.f.Close()) // closing drops the lock
}

func (s *stateFile) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.b[off])) }
func (s *stateFile) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.b[off])) }

// check validates the header, the GPU and the process tables.
func (s *stateFile) check() error {
	if _, _, err := checkShm(s.b); err != nil {
		return err
	}
	le := binary.LittleEndian
	if le.Uint64(s.b[shmOffFileSize:]) != shmFileSize || le.Uint32(s.b[shmOffMaxProcs:]) != shmMaxProcs ||
		le.Uint32(s.b[shmOffProcSize:]) != shmProcSize || le.Uint64(s.b[shmOffProcOff:]) != shmHeaderSize+shmMaxGPUs*shmGPUSize {
		return fmt.Errorf("%w: unexpected process table layout", errShm)
	}
	return nil
}

// CreateGroupState makes a group's state file as the library does (race-free
// under the file lock, magic stored last) if it is missing or empty, naming
// the pid namespace of procRoot/self as the group's host namespace: members
// in other namespaces (containers) then leave their host pid for the daemon
// to fill in. A valid existing file is kept; an invalid one is an error and
// left untouched. Mode 0666: the file is reached through the group directory.
func CreateGroupState(procRoot, path, group string) error {
	return createGroupState(procRoot, path, group, 0o666)
}

// createGroupState is CreateGroupState with the file's mode.
func createGroupState(procRoot, path, group string, mode os.FileMode) (err error) {
	defer guardFault(&err)()
	var ns unix.Stat_t
	if err := unix.Stat(procRoot+"/self/ns/pid", &ns); err != nil {
		return fmt.Errorf("pid namespace: %w", err)
	}
	s, err := openState(path, true, stateLockWait)
	if err != nil {
		return err
	}
	defer func() { _ = s.close() }() // nothing to lose: the writes are in the mapping
	if err := s.f.Chmod(mode); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if atomic.LoadUint64(s.u64(0)) != 0 {
		if err := s.check(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	}
	le := binary.LittleEndian
	clear(s.b)
	le.PutUint32(s.b[shmOffVersion:], shmVersion)
	le.PutUint32(s.b[shmOffHdrSize:], shmHeaderSize)
	le.PutUint64(s.b[shmOffFileSize:], shmFileSize)
	le.PutUint32(s.b[shmOffMaxGPUs:], shmMaxGPUs)
	le.PutUint32(s.b[shmOffMaxProcs:], shmMaxProcs)
	le.PutUint32(s.b[shmOffGPUSize:], shmGPUSize)
	le.PutUint32(s.b[shmOffProcSize:], shmProcSize)
	le.PutUint64(s.b[shmOffGPUOff:], shmHeaderSize)
	le.PutUint64(s.b[shmOffProcOff:], shmHeaderSize+shmMaxGPUs*shmGPUSize)
	le.PutUint64(s.b[shmOffHostPIDNS:], ns.Ino)
	copy(s.b[shmOffGroup:shmOffGroup+shmNameLen-1], group)
	atomic.StoreUint64(s.u64(0), shmMagic)
	return nil
}

// procs calls fn for each live process entry (its offset and contents).
func (s *stateFile) procs(fn func(off int, p GroupProcess) bool) {
	base := shmHeaderSize + shmMaxGPUs*shmGPUSize
	for i := range shmMaxProcs {
		off := base + i*shmProcSize
		if atomic.LoadUint32(s.u32(off)) != shmProcLive {
			continue
		}
		p := GroupProcess{PID: int32(atomic.LoadUint32(s.u32(off + shmProcOffPID))),
			HostPID:   int32(atomic.LoadUint32(s.u32(off + shmProcOffHost))),
			StartTime: atomic.LoadUint64(s.u64(off + shmProcOffStart)), PIDNS: atomic.LoadUint64(s.u64(off + shmProcOffNS))}
		if !fn(off, p) {
			return
		}
	}
}

// GroupProcesses returns the live processes of a group state file, from a
// copy read without its lock (entries are stored atomically, the state
// last): a member holding the lock holds up neither the node agent's
// publisher nor `group rm`, and a file truncated meanwhile is a short read.
func GroupProcesses(path string) (_ []GroupProcess, err error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	s := &stateFile{b: make([]byte, shmFileSize)}
	if n, err := f.ReadAt(s.b, 0); n != shmFileSize {
		return nil, fmt.Errorf("%w: %s: %d bytes read, want %d (%w)", errShm, path, n, shmFileSize, err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []GroupProcess
	s.procs(func(_ int, p GroupProcess) bool { out = append(out, p); return true })
	return out, nil
}

// setHostPID records hostPID in the live entry of the process (pid, pidns,
// start) of a group state file, under the file's lock; start 0 matches any.
// It reports whether the entry was there.
func setHostPID(path string, pid int32, pidns, start uint64, hostPID int32) (_ bool, err error) {
	defer guardFault(&err)()
	s, err := openState(path, false, stateLockWait)
	if err != nil {
		return false, err
	}
	defer func() { _ = s.close() }() // the store is in the mapping
	if err := s.check(); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	found := false
	s.procs(func(off int, p GroupProcess) bool {
		if p.PID != pid || p.PIDNS != pidns || (start != 0 && p.StartTime != start) {
			return true
		}
		atomic.StoreUint32(s.u32(off+shmProcOffHost), uint32(hostPID))
		found = true
		return false
	})
	return found, nil
}

// Header fields of the group's own limit (shm.h: limit, limit_set).
const (
	shmOffLimit    = 128
	shmOffLimitSet = 136
)

// setGroupLimit makes limit (bytes, 0 = none) the group's: it is written
// into the state file's header, where every GPU slot a member claims later
// takes it whatever the member's GPUSLICE_MEMORY_LIMIT says, and into every
// slot already claimed (marked not elastic). The header under the file's lock
// (waiting at most wait), so no member claims a slot in between. Only the
// time-slice daemon writes limits.
func setGroupLimit(path string, limit uint64, wait time.Duration) (changed int, err error) {
	if err := setHeaderLimit(path, limit, wait); err != nil {
		return 0, err
	}
	return setMemoryLimit(path, limit)
}

// setHeaderLimit writes limit into the state file's header and marks it set.
func setHeaderLimit(path string, limit uint64, wait time.Duration) (err error) {
	defer guardFault(&err)()
	f, err := group.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }() // closing drops the lock
	if err := lockState(f, path, wait); err != nil {
		return err
	}
	return editShm(f, path, func(b []byte, _, _ int) {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[shmOffLimit])), limit)
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[shmOffLimitSet])), 1)
	})
}
