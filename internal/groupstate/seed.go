package groupstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/gpuslice/gpuslice/internal/group"
)

// SeedMaxKiB is the most a context seed says (1 + KiB, as ContextKiB):
// ContextGuess, what a group reserves before any context was measured.
const SeedMaxKiB = ContextGuess>>10 + 1

// ContextSeed is the node's context seed after seeing the groups'
// measurements measured (1 + KiB each, 0: none), given the seed before, prev:
// the largest of them, each taken at most at SeedMaxKiB. The largest, not the
// latest or the median: a group's members write its measurement, so a
// hostile group may say anything. Taking the largest, a low figure lowers no
// one's reservation below what another group measured (a context reserved
// below what the driver takes would sit on the card past the group's limit
// until trued up); capped at the guess, a high one makes no one reserve more
// than a group that knows nothing reserves today. Never lower than prev:
// a measurement stays known after its group is gone.
func ContextSeed(prev uint32, measured []uint32) uint32 {
	seed := min(prev, SeedMaxKiB)
	for _, kib := range measured {
		seed = max(seed, min(kib, SeedMaxKiB))
	}
	return seed
}

// SetContextSeed stores seed (1 + KiB, at most SeedMaxKiB) in a state file's
// header unless it holds it already; true if it changed. The time-slice
// daemon alone writes it.
func SetContextSeed(path string, seed uint32) (changed bool, err error) {
	defer GuardFault(&err)()
	f, err := group.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	err = editShm(f, path, func(b []byte, _, _ int) {
		p := (*uint32)(unsafe.Pointer(&b[OffSeed]))
		changed = atomic.SwapUint32(p, min(seed, SeedMaxKiB)) != min(seed, SeedMaxKiB)
	})
	return changed, err
}

// DeviceSeed is what a context takes on one kind of device of the node, as
// the node measured it (the time-slice daemon's context probe): devices whose
// driver reports TotalMiB MiB of memory take KiB (1 + KiB, as ContextKiB).
type DeviceSeed struct {
	TotalMiB uint32
	KiB      uint32
}

// SetDeviceSeeds stores seeds in a state file's header (Header.DeviceSeedMiB,
// DeviceSeedKiB): an entry of the same TotalMiB takes the new figure (the
// probe measured it: it may go down after a driver change); a new kind takes
// a free entry, its KiB stored before its TotalMiB, so a member never pairs a
// kind with another's figure. Seeds with TotalMiB or KiB 0 are skipped. It
// returns how many entries changed and how many seeds found no free entry.
// The time-slice daemon alone writes them.
func SetDeviceSeeds(path string, seeds []DeviceSeed) (changed, full int, err error) {
	defer GuardFault(&err)()
	f, err := group.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	err = editShm(f, path, func(b []byte, _, _ int) {
		mib := func(i int) *uint32 { return (*uint32)(unsafe.Pointer(&b[OffDevSeedMiB+4*i])) }
		kib := func(i int) *uint32 { return (*uint32)(unsafe.Pointer(&b[OffDevSeedKiB+4*i])) }
		for _, s := range seeds {
			if s.TotalMiB == 0 || s.KiB == 0 {
				continue
			}
			free := -1
			for i := range DeviceSeeds {
				switch m := atomic.LoadUint32(mib(i)); {
				case m == s.TotalMiB:
					if atomic.SwapUint32(kib(i), s.KiB) != s.KiB {
						changed++
					}
					free = -2
				case m == 0 && free == -1:
					free = i
				}
				if free == -2 {
					break
				}
			}
			switch {
			case free >= 0:
				atomic.StoreUint32(kib(free), s.KiB)
				atomic.StoreUint32(mib(free), s.TotalMiB)
				changed++
			case free == -1:
				full++
			}
		}
	})
	return changed, full, err
}

// ReadDeviceSeeds returns the device seeds a state file's header holds.
func ReadDeviceSeeds(path string) ([]DeviceSeed, error) {
	_, out, err := ReadSeeds(path)
	return out, err
}

// ReadSeeds returns the context seed (1 + KiB, 0: none) and the device seeds
// a state file's header holds.
func ReadSeeds(path string) (seed uint32, out []DeviceSeed, err error) {
	b := make([]byte, HeaderSize+MaxGPUs*GPUSize) // CheckHeader bounds the GPU table too
	f, err := group.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	n, err := f.ReadAt(b, 0)
	if n < HeaderSize {
		return 0, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if _, _, err := CheckHeader(b[:n]); err != nil {
		return 0, nil, fmt.Errorf("%s: %w", path, err)
	}
	le := binary.LittleEndian
	for i := range DeviceSeeds {
		if m := le.Uint32(b[OffDevSeedMiB+4*i:]); m != 0 {
			out = append(out, DeviceSeed{TotalMiB: m, KiB: le.Uint32(b[OffDevSeedKiB+4*i:])})
		}
	}
	return le.Uint32(b[OffSeed:]), out, nil
}

// SeedsHeld says whether a header's device seeds (have) hold each of want: an
// entry of its kind with its figure, or, where the header has no entry of
// that kind, no free entry either (full: not written).
func SeedsHeld(have, want []DeviceSeed) bool {
	for _, w := range want {
		i := slices.IndexFunc(have, func(h DeviceSeed) bool { return h.TotalMiB == w.TotalMiB })
		if (i >= 0 && have[i].KiB != w.KiB) || (i < 0 && len(have) < DeviceSeeds) {
			return false
		}
	}
	return true
}
