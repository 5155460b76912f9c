package timeslice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// A read-only mirror of the library's group state file layout
// (libgpuslice/include/gpuslice/shm.h, version 1); TestShmLayout checks it
// against a C build of that header.
const (
	shmMagic         = 0x4543494c53555047
	shmVersion       = 1
	shmHeaderSize    = 256
	shmGPUSize       = 128
	shmMaxGPUs       = 16
	shmSlotReady     = 2
	shmOffVersion    = 8
	shmOffHdrSize    = 12
	shmOffMaxGPUs    = 24
	shmOffGPUSize    = 32
	shmOffGPUOff     = 40
	shmGPUOffUUID    = 8
	shmGPUUUIDLen    = 64
	shmGPUOffLimit   = 72
	shmGPUOffUsed    = 80
	shmGPUOffPeak    = 88
	shmGPUOffRefused = 96
	// Elastic memory (zero in files of groups without it).
	shmGPUOffElastic = 4
	shmGPUOffMin     = 104
	shmGPUOffManaged = 112
	shmGPUOffSpilled = 120
	shmElasticOn     = 1
	shmElasticSpill  = 2
)

// gpuMemory is one GPU slot of a group state file.
type gpuMemory struct {
	UUID  string
	Limit uint64 // 0 = no limit
	Used  uint64
	Peak  uint64
	// Elastic memory: Managed bytes were allocated as managed memory past
	// the guarantee, Spilled of them lie in host memory now.
	Managed, Spilled uint64
	// Refused counts allocations refused at the limit.
	Refused uint64
}

var errShm = errors.New("bad group state file")

// checkShm validates a state file's header and returns its GPU area bounds.
func checkShm(b []byte) (off, n int, err error) {
	le := binary.LittleEndian
	if len(b) < shmHeaderSize {
		return 0, 0, fmt.Errorf("%w: %d bytes", errShm, len(b))
	}
	switch {
	case le.Uint64(b) != shmMagic:
		return 0, 0, fmt.Errorf("%w: magic %#x", errShm, le.Uint64(b))
	case le.Uint32(b[shmOffVersion:]) != shmVersion:
		return 0, 0, fmt.Errorf("%w: version %d, want %d", errShm, le.Uint32(b[shmOffVersion:]), shmVersion)
	case le.Uint32(b[shmOffHdrSize:]) != shmHeaderSize || le.Uint32(b[shmOffGPUSize:]) != shmGPUSize:
		return 0, 0, fmt.Errorf("%w: unexpected struct sizes", errShm)
	}
	off, n = int(le.Uint64(b[shmOffGPUOff:])), int(le.Uint32(b[shmOffMaxGPUs:]))
	if off < shmHeaderSize || n <= 0 || n > shmMaxGPUs || off+n*shmGPUSize > len(b) {
		return 0, 0, fmt.Errorf("%w: GPU table out of bounds", errShm)
	}
	return off, n, nil
}

// readMemory returns the ready GPU slots of a group state file.
func readMemory(path string) (out []gpuMemory, err error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, shmHeaderSize+shmMaxGPUs*shmGPUSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && n < shmHeaderSize {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	off, count, err := checkShm(b[:n])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	le := binary.LittleEndian
	for i := range count {
		s := b[off+i*shmGPUSize : off+(i+1)*shmGPUSize]
		if le.Uint32(s) != shmSlotReady {
			continue
		}
		out = append(out, gpuMemory{UUID: proto.String(s[shmGPUOffUUID : shmGPUOffUUID+shmGPUUUIDLen]),
			Limit: le.Uint64(s[shmGPUOffLimit:]), Used: le.Uint64(s[shmGPUOffUsed:]), Peak: le.Uint64(s[shmGPUOffPeak:]),
			Managed: le.Uint64(s[shmGPUOffManaged:]), Spilled: le.Uint64(s[shmGPUOffSpilled:]),
			Refused: le.Uint64(s[shmGPUOffRefused:])})
	}
	return out, nil
}

// HeaderLimit reads the group's limit from a state file's header and whether
// it is set (by the time-slice daemon).
func HeaderLimit(path string) (limit uint64, set bool, err error) { return headerLimit(path) }

// headerLimit is HeaderLimit.
func headerLimit(path string) (limit uint64, set bool, err error) {
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, false, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	b := make([]byte, shmHeaderSize)
	if n, err := f.ReadAt(b, 0); n < shmHeaderSize {
		return 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	if le := binary.LittleEndian; le.Uint64(b) == shmMagic && le.Uint32(b[shmOffVersion:]) == shmVersion {
		return le.Uint64(b[shmOffLimit:]), le.Uint32(b[shmOffLimitSet:]) == 1, nil
	}
	return 0, false, fmt.Errorf("%s: %w", path, errShm)
}

// setMemoryLimit stores limit (0 = none) in every ready GPU slot of a group
// state file, atomically, so running processes apply it to their next
// allocation; the slots are marked not elastic. It returns how many slots it
// changed.
func setMemoryLimit(path string, limit uint64) (changed int, err error) {
	return setSlots(path, "", slotLimits{limit: limit})
}

// slotLimits are what the daemon writes into a GPU slot.
type slotLimits struct {
	limit   uint64 // the allowance: what the group may hold without asking
	min     uint64 // elastic: the guarantee
	elastic uint32 // shmElastic* bits
}

// setSlots writes l into the ready GPU slots of a state file (only the one
// of uuid when not empty).
func setSlots(path, uuid string, l slotLimits) (changed int, err error) {
	defer guardFault(&err)()
	f, err := group.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	err = editShm(f, path, func(b []byte, off, count int) {
		for i := range count {
			s := off + i*shmGPUSize
			state := (*uint32)(unsafe.Pointer(&b[s]))
			if atomic.LoadUint32(state) != shmSlotReady ||
				(uuid != "" && proto.String(b[s+shmGPUOffUUID:s+shmGPUOffUUID+shmGPUUUIDLen]) != uuid) {
				continue
			}
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[s+shmGPUOffMin])), l.min)
			atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[s+shmGPUOffElastic])), l.elastic)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[s+shmGPUOffLimit])), l.limit)
			changed++
		}
	})
	return changed, err
}

// editShm maps the open state file f (at path) and, when its header is
// valid, calls edit with the mapping and its GPU area's bounds; a file too
// short or with a bad header is an error.
func editShm(f *os.File, path string, edit func(b []byte, off, count int)) error {
	size := shmHeaderSize + shmMaxGPUs*shmGPUSize
	if st, err := f.Stat(); err != nil || st.Size() < int64(size) {
		return fmt.Errorf("%s: %w: too short (%w)", path, errShm, err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s: %w", path, err)
	}
	off, count, cerr := checkShm(b)
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
