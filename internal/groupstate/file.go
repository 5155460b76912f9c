package groupstate

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

// Process is one live process of a group state file.
type Process struct {
	PID       int32  // in the process's own pid namespace
	HostPID   int32  // as NVML names it; 0 = not known yet
	StartTime uint64 // /proc/<pid>/stat field 22
	PIDNS     uint64 // inode of its pid namespace
}

// ErrTruncated: a state file shrank under its mapping (anyone who can write
// it can truncate it); the access faulted and was turned into this error.
var ErrTruncated = errors.New("group state file truncated while in use")

// GuardFault turns a memory fault while the caller touches a mapped state
// file into ErrTruncated in *err instead of a crash of the daemon. Use as
// `defer GuardFault(&err)()` in functions that access a mapping.
func GuardFault(err *error) func() {
	old := debug.SetPanicOnFault(true)
	return func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if re, ok := r.(interface{ Addr() uintptr }); ok && re != nil {
				*err = errors.Join(*err, ErrTruncated)
				return
			}
			panic(r)
		}
	}
}

// State is a mapped group state file, locked against the library's
// processes (an open-file-description lock, which conflicts with their
// fcntl record locks, and not with other goroutines' own descriptions).
type State struct {
	f *os.File
	b []byte
}

// How long the daemon and the node agent wait for a group state file's lock.
// Its members take it for a moment (attach, a slot claimed), but any of them,
// or the container the file is mounted into, may hold it for ever: nothing of
// ours waits for it unbounded (a refresh would stop for every group).
const (
	LockWait      = time.Second           // host pids, a state made, members listed
	BriefLockWait = 10 * time.Millisecond // the daemon's refresh and settings: a busy file is tried again at the next refresh
)

// ErrLocked is returned when a group state file's lock stayed taken.
var ErrLocked = errors.New("group state file locked by another process")

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
			return fmt.Errorf("%w: %s, for over %v", ErrLocked, path, wait)
		}
		time.Sleep(pause)
	}
}

// Open opens, locks (waiting at most wait) and maps path. create makes
// it (mode 0666) if missing; an empty file is then sized, and init fills it.
func Open(path string, create bool, wait time.Duration) (*State, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err := group.OpenFile(path, flags, 0o666)
	if err != nil {
		return nil, err
	}
	s := &State{f: f}
	if err := lockState(f, path, wait); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	st, err := f.Stat()
	if err == nil && st.Size() == 0 && create {
		err = f.Truncate(int64(FileSize))
	} else if err == nil && st.Size() != int64(FileSize) {
		err = fmt.Errorf("%w: %d bytes, want %d", ErrBad, st.Size(), FileSize)
	}
	if err == nil {
		s.b, err = unix.Mmap(int(f.Fd()), 0, FileSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", path, err), s.Close())
	}
	return s, nil
}

// Close unmaps, unlocks and closes.
func (s *State) Close() error {
	var err error
	if s.b != nil {
		err = unix.Munmap(s.b)
	}
	return errors.Join(err, s.f.Close()) // closing drops the lock
}

// U32 and U64 point into the mapping at off (for atomic access: members, tests acting as members).
func (s *State) U32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.b[off])) }
func (s *State) U64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.b[off])) }

// Check validates the header, the GPU and the process tables.
func (s *State) Check() error {
	if _, _, err := CheckHeader(s.b); err != nil {
		return err
	}
	le := binary.LittleEndian
	if le.Uint64(s.b[OffFileSize:]) != uint64(FileSize) || le.Uint32(s.b[OffMaxProcs:]) != MaxProcs ||
		le.Uint32(s.b[OffProcSize:]) != uint32(ProcSize) || le.Uint64(s.b[OffProcOffset:]) != uint64(ProcsOffset) {
		return fmt.Errorf("%w: unexpected process table layout", ErrBad)
	}
	return nil
}

// Procs calls fn for each live process entry (its offset and contents).
// Entries being claimed (ProcClaiming) are not live.
func (s *State) Procs(fn func(off int, p Process) bool) {
	base := HeaderSize + MaxGPUs*GPUSize
	for i := range MaxProcs {
		off := base + i*ProcSize
		p, live := s.procAt(off) // ProcClaiming: being filled in, not live
		if !live {
			continue
		}
		if !fn(off, p) {
			return
		}
	}
}

// Processes returns the live processes of a group state file, from a
// copy read without its lock (entries are stored atomically, the state
// last): a member holding the lock holds up neither the node agent's
// publisher nor `group rm`, and a file truncated meanwhile is a short read.
func Processes(path string) (_ []Process, err error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	s := &State{b: make([]byte, FileSize)}
	if n, err := f.ReadAt(s.b, 0); n != FileSize {
		return nil, fmt.Errorf("%w: %s: %d bytes read, want %d (%w)", ErrBad, path, n, FileSize, err)
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Process
	s.Procs(func(_ int, p Process) bool { out = append(out, p); return true })
	return out, nil
}

// SetHostPID records hostPID in the live entry of the process (pid, pidns,
// start) of a group state file, under the file's lock; start 0 matches any.
// It reports whether the entry was there.
func SetHostPID(path string, pid int32, pidns, start uint64, hostPID int32) (_ bool, err error) {
	defer GuardFault(&err)()
	s, err := Open(path, false, LockWait)
	if err != nil {
		return false, err
	}
	defer func() { _ = s.Close() }() // the store is in the mapping
	if err := s.Check(); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	found := false
	s.Procs(func(off int, p Process) bool {
		if p.PID != pid || p.PIDNS != pidns || (start != 0 && p.StartTime != start) {
			return true
		}
		atomic.StoreUint32(s.U32(off+ProcOffHostPID), uint32(hostPID))
		found = true
		return false
	})
	return found, nil
}

// SetLimit makes limit (bytes, 0 = none) the group's: it is written
// into the state file's header, where every GPU slot a member claims later
// takes it whatever the member's GPUSLICE_MEMORY_LIMIT says, and into every
// slot already claimed (marked not elastic). The header under the file's lock
// (waiting at most wait), so no member claims a slot in between. Only the
// time-slice daemon writes limits.
func SetLimit(path string, limit uint64, wait time.Duration) (changed int, err error) {
	if err := SetHeaderLimit(path, limit, wait); err != nil {
		return 0, err
	}
	return SetMemoryLimit(path, limit)
}

// SetHeaderLimit writes limit into the state file's header and marks it set.
func SetHeaderLimit(path string, limit uint64, wait time.Duration) (err error) {
	defer GuardFault(&err)()
	f, err := group.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }() // closing drops the lock
	if err := lockState(f, path, wait); err != nil {
		return err
	}
	return editShm(f, path, func(b []byte, _, _ int) {
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[OffLimit])), limit)
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[OffLimitSet])), 1)
	})
}
