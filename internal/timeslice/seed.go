package timeslice

import (
	"errors"
	"io/fs"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// Context seeds: what a context takes on this node, as the groups measured
// it (their state files' ContextKiB), goes into every group's state file
// (groupstate.ContextSeed, SetContextSeed), so a new group's first contexts
// are reserved at a measured size, not the guess: only the node's first
// context is reserved blind. The seed is kept in memory and found again in
// the groups' state files (which outlive the daemon) at its first refresh.

// seeGroupContexts takes a group's measured contexts (its GPU slots, read
// at a status refresh) into the node's seed and gives the group the seed if
// its state file does not hold it yet.
func (s *Server) seeGroupContexts(name string, gpus []groupstate.GPUMemory) {
	kib := make([]uint32, 0, len(gpus))
	for _, g := range gpus {
		kib = append(kib, g.ContextKiB)
	}
	s.mu.Lock()
	s.seed = groupstate.ContextSeed(s.seed, kib)
	s.mu.Unlock()
	s.giveSeed(name, false)
}

// giveSeed writes the node's context seed into a group's state file unless
// the daemon gave it that seed already (always, with again: a state file
// made anew, before its limit is written). Groups without settings are not
// the daemon's: nothing is written into theirs.
func (s *Server) giveSeed(name string, again bool) {
	s.mu.Lock()
	seed, given := s.seed, s.seedGiven[name]
	_, known := s.settings[name]
	s.mu.Unlock()
	if seed == 0 || !known || (!again && given == seed) {
		return
	}
	_, err := groupstate.SetContextSeed(groupstate.Path(s.cfg.RunDir, name), seed)
	switch {
	case err == nil:
		s.mu.Lock()
		if _, known := s.settings[name]; known {
			s.seedGiven[name] = seed
		}
		s.mu.Unlock()
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, groupstate.ErrIncomplete):
		s.log.V(1).Info("context seed not written", "group", name, "seedKiB", seed-1, "err", err)
	}
}

// primeSeed finds the node's context seed in the state files of the groups
// names at the daemon's start, before their settings are applied: what an
// earlier daemon knew is known again from the groups that measured it.
func (s *Server) primeSeed(names []string) {
	var kib []uint32
	for _, n := range names {
		gpus, err := groupstate.ReadMemory(groupstate.Path(s.cfg.RunDir, n))
		if err != nil {
			continue
		}
		for _, g := range gpus {
			kib = append(kib, g.ContextKiB)
		}
	}
	s.mu.Lock()
	s.seed = groupstate.ContextSeed(s.seed, kib)
	s.mu.Unlock()
}
