package groupstate

import (
	"errors"
	"os"
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
