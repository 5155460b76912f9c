package groupstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// GPUMemory is one GPU slot of a group state file.
type GPUMemory struct {
	UUID  string
	Limit uint64 // 0 = no limit
	Used  uint64
	Peak  uint64
	// Elastic memory: Managed bytes were allocated as managed memory past
	// the guarantee, Spilled of them lie in host memory now.
	Managed, Spilled uint64
	// Refused counts allocations refused at the limit.
	Refused uint64
	// ContextKiB is what the group's last context on this GPU took, as a
	// member measured it (1 + KiB; 0: none measured). Untrusted: members
	// write it.
	ContextKiB uint32
}

// ErrBad is wrapped when a file is no state file of a version this reader knows.
var ErrBad = errors.New("bad group state file")

// CheckHeader validates a state file's header and returns its GPU area bounds.
func CheckHeader(b []byte) (off, n int, err error) {
	le := binary.LittleEndian
	switch {
	case len(b) == 0 || len(b) >= 8 && le.Uint64(b) == 0:
		return 0, 0, ErrIncomplete // its maker stores the magic last
	case len(b) < HeaderSize:
		return 0, 0, fmt.Errorf("%w: %d bytes", ErrBad, len(b))
	}
	switch {
	case le.Uint64(b) != Magic:
		return 0, 0, fmt.Errorf("%w: magic %#x", ErrBad, le.Uint64(b))
	case !slices.Contains(Versions, le.Uint32(b[OffVersion:])):
		return 0, 0, fmt.Errorf("%w: version %d, want one of %v", ErrBad, le.Uint32(b[OffVersion:]), Versions)
	case le.Uint32(b[OffHeaderSize:]) != uint32(HeaderSize) || le.Uint32(b[OffGPUSize:]) != uint32(GPUSize):
		return 0, 0, fmt.Errorf("%w: unexpected struct sizes", ErrBad)
	}
	off, n = int(le.Uint64(b[OffGPUOffset:])), int(le.Uint32(b[OffMaxGPUs:]))
	if off < HeaderSize || n <= 0 || n > MaxGPUs || off+n*GPUSize > len(b) {
		return 0, 0, fmt.Errorf("%w: GPU table out of bounds", ErrBad)
	}
	return off, n, nil
}

// ReadMemory returns the ready GPU slots of a group state file.
func ReadMemory(path string) (out []GPUMemory, err error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, HeaderSize+MaxGPUs*GPUSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && n < HeaderSize {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	off, count, err := CheckHeader(b[:n])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	le := binary.LittleEndian
	for i := range count {
		s := b[off+i*GPUSize : off+(i+1)*GPUSize]
		if le.Uint32(s) != SlotReady {
			continue
		}
		out = append(out, GPUMemory{UUID: proto.String(s[GPUOffUUID : GPUOffUUID+UUIDLen]),
			Limit: le.Uint64(s[GPUOffLimit:]), Used: le.Uint64(s[GPUOffUsed:]), Peak: le.Uint64(s[GPUOffPeak:]),
			Managed: le.Uint64(s[GPUOffManaged:]), Spilled: le.Uint64(s[GPUOffSpilled:]),
			Refused: le.Uint64(s[GPUOffRefused:]), ContextKiB: le.Uint32(b[OffContextKiB+4*i:])})
	}
	return out, nil
}

// HeaderLimit reads the group's limit from a state file's header and whether
// it is set (by the time-slice daemon).
func HeaderLimit(path string) (limit uint64, set bool, err error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, false, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, HeaderSize)
	if n, err := f.ReadAt(b, 0); n < HeaderSize {
		return 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	if le := binary.LittleEndian; le.Uint64(b) == Magic && slices.Contains(Versions, le.Uint32(b[OffVersion:])) {
		return le.Uint64(b[OffLimit:]), le.Uint32(b[OffLimitSet:]) == 1, nil
	}
	return 0, false, fmt.Errorf("%s: %w", path, ErrBad)
}

// SetMemoryLimit stores limit (0 = none) in every ready GPU slot of a group
// state file, atomically, so running processes apply it to their next
// allocation; the slots are marked not elastic. It returns how many slots it
// changed.
func SetMemoryLimit(path string, limit uint64) (changed int, err error) {
	return SetSlots(path, "", SlotLimits{Limit: limit})
}

// SlotLimits are what the daemon writes into a GPU slot.
type SlotLimits struct {
	Limit   uint64 // the allowance: what the group may hold without asking
	Min     uint64 // elastic: the guarantee
	Elastic uint32 // ElasticOn, ElasticSpill bits
}

// SetSlots writes l into the ready GPU slots of a state file (only the one
// of uuid when not empty).
func SetSlots(path, uuid string, l SlotLimits) (changed int, err error) {
	defer GuardFault(&err)()
	f, err := group.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	err = editShm(f, path, func(b []byte, off, count int) {
		for i := range count {
			s := off + i*GPUSize
			state := (*uint32)(unsafe.Pointer(&b[s]))
			if atomic.LoadUint32(state) != SlotReady ||
				(uuid != "" && proto.String(b[s+GPUOffUUID:s+GPUOffUUID+UUIDLen]) != uuid) {
				continue
			}
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[s+GPUOffMin])), l.Min)
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[s+GPUOffElastic])), l.Elastic)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[s+GPUOffLimit])), l.Limit)
			changed++
		}
	})
	return changed, err
}

// editShm maps the open state file f (at path) and, when its header is
// valid, calls edit with the mapping and its GPU area's bounds; a file too
// short or with a bad header is an error.
func editShm(f *os.File, path string, edit func(b []byte, off, count int)) error {
	size := HeaderSize + MaxGPUs*GPUSize
	if st, err := f.Stat(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	} else if st.Size() == 0 {
		return fmt.Errorf("%s: %w", path, ErrIncomplete) // a member is making it (under the lock we hold now: not for long)
	} else if st.Size() < int64(size) {
		return fmt.Errorf("%s: %w: too short (%d bytes)", path, ErrBad, st.Size())
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s: %w", path, err)
	}
	off, count, cerr := CheckHeader(b)
	if cerr == nil {
		edit(b, off, count)
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unmap %s: %w", path, err)
	}
	if cerr != nil {
		return fmt.Errorf("%s: %w", path, cerr)
	}
	return nil
}
