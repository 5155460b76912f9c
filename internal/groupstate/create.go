package groupstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrIncomplete: a state file being made (empty, or its magic not stored
// yet). Not an error of the file: its maker finishes it under its lock; a
// reader tries again later.
var ErrIncomplete = errors.New("group state file not complete yet")

// Create makes a group's state file if it is missing, naming the pid
// namespace of procRoot/self as the group's host namespace: members in other
// namespaces (containers) then leave their host pid for the daemon to fill
// in. The file is written in full under another name and linked into place,
// so no reader (the daemon, a member) ever sees it half made. A file a member
// made meanwhile (the library creates an empty file and fills it under the
// file lock) is kept, or filled if still empty; a valid existing file is kept;
// an invalid one is an error and left untouched. Mode 0666: the file is
// reached through the group directory.
func Create(procRoot, path, group string) error {
	return CreateMode(procRoot, path, group, 0o666)
}

// CreateMode is Create with the file's mode.
func CreateMode(procRoot, path, group string, mode os.FileMode) (err error) {
	var ns unix.Stat_t
	if err := unix.Stat(procRoot+"/self/ns/pid", &ns); err != nil {
		return fmt.Errorf("pid namespace: %w", err)
	}
	hdr := header(ns.Ino, group)
	if err := linkNew(path, hdr, mode); !errors.Is(err, fs.ErrExist) {
		return err
	}
	return fillExisting(path, hdr, mode)
}

// header is a new state file's header.
func header(hostPIDNS uint64, group string) []byte {
	le := binary.LittleEndian
	b := make([]byte, HeaderSize)
	le.PutUint64(b, Magic)
	le.PutUint32(b[OffVersion:], Version)
	le.PutUint32(b[OffHeaderSize:], uint32(HeaderSize))
	le.PutUint64(b[OffFileSize:], uint64(FileSize))
	le.PutUint32(b[OffMaxGPUs:], MaxGPUs)
	le.PutUint32(b[OffMaxProcs:], MaxProcs)
	le.PutUint32(b[OffGPUSize:], uint32(GPUSize))
	le.PutUint32(b[OffProcSize:], uint32(ProcSize))
	le.PutUint64(b[OffGPUOffset:], uint64(GPUsOffset))
	le.PutUint64(b[OffProcOffset:], uint64(ProcsOffset))
	le.PutUint64(b[OffHostPIDNS:], hostPIDNS)
	copy(b[OffGroup:OffGroup+NameLen-1], group)
	return b
}

// linkNew writes a complete state file beside path and links it there; it
// wraps fs.ErrExist where path exists (nothing is changed then).
func linkNew(path string, hdr []byte, mode os.FileMode) (err error) {
	if _, err := os.Lstat(path); err == nil {
		return fs.ErrExist
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { err = errors.Join(err, os.Remove(tmp)) }() // the link keeps the file
	err = f.Truncate(int64(FileSize))
	if err == nil {
		_, err = f.WriteAt(hdr, 0)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fs.ErrExist
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// fillExisting takes a state file that exists: a valid one is kept, an empty
// one (a member is making it) filled under the file lock, magic stored last.
func fillExisting(path string, hdr []byte, mode os.FileMode) (err error) {
	defer GuardFault(&err)()
	s, err := Open(path, true, LockWait)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }() // nothing to lose: the writes are in the mapping
	if err := s.f.Chmod(mode); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if atomic.LoadUint64(s.U64(0)) != 0 {
		if err := s.Check(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	}
	clear(s.b)
	copy(s.b[8:], hdr[8:])
	atomic.StoreUint64(s.U64(0), Magic)
	return nil
}
