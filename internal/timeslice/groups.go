package timeslice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/paths"
)

// loadGroups applies the settings of every group already in the tree.
func (s *Server) loadGroups(ctx context.Context) error {
	names, err := s.tree.List()
	if err != nil {
		return fmt.Errorf("read group tree: %w", err)
	}
	for _, n := range names {
		s.groupChanged(ctx, n)
	}
	return nil
}

// groupChanged applies a group's settings after its files changed. Invalid
// settings change nothing: the last valid ones stay in force and are written
// back to the files (for a group never seen valid, its valid files are kept
// and the invalid ones reset to their defaults; the write-back's own events
// then apply them).
func (s *Server) groupChanged(ctx context.Context, name string) {
	log := klog.FromContext(ctx).WithValues("group", name)
	s.bindingChanged(ctx, name, s.tree.Exists(name))
	if !s.tree.Exists(name) {
		s.mu.Lock()
		delete(s.settings, name)
		s.mu.Unlock()
		return
	}
	st, err := s.tree.Read(name)
	s.mu.Lock()
	old, known := s.settings[name]
	if err == nil {
		s.settings[name] = st
	}
	gpus := make([]*gpuState, 0, len(s.gpus))
	for _, g := range s.gpus {
		gpus = append(gpus, g)
	}
	s.mu.Unlock()
	if err != nil {
		log.Error(err, "invalid group settings ignored; restoring the last valid ones")
		if !known { // none seen yet: keep the valid files, reset the others
			old = s.tree.ReadValid(name)
		}
		if werr := s.tree.Write(name, old); werr != nil {
			log.Error(werr, "restore group settings")
		}
		return
	}
	if known && old == st {
		return
	}
	for _, g := range gpus {
		if err := g.update(name, st.Params()); err != nil {
			log.Error(err, "apply group settings", "gpu", g.uuid.String())
		}
	}
	memChanged := !known || old.MemoryMax != st.MemoryMax || old.MemoryMin != st.MemoryMin || old.MemorySpill != st.MemorySpill
	switch {
	case memChanged && st.MemoryMin != 0:
		s.applyElastic(name, st)
	case memChanged:
		s.applyMemoryLimit(log, name)
	}
	log.V(1).Info("group settings applied", "slice", st.Slice, "share", st.Share, "priority", st.Priority, "memoryMax", st.MemoryMax)
}

// applyMemoryLimit writes the group's memory.max into its state file so its
// running processes enforce it from their next allocation. A state file whose
// lock a member holds past reapLockWait is tried again at each status refresh
// (retryLimits): no group's lock holds up the others' settings.
func (s *Server) applyMemoryLimit(log klog.Logger, name string) {
	s.limitMu.Lock()
	defer s.limitMu.Unlock()
	st := s.settingsOf(name)
	n, err := setGroupLimit(paths.GroupStateFile(s.cfg.RunDir, name), st.MemoryMax, reapLockWait)
	s.mu.Lock()
	if errors.Is(err, errStateLocked) && st.MemoryMin == 0 {
		s.unapplied[name] = struct{}{}
	} else {
		delete(s.unapplied, name)
	}
	s.mu.Unlock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, errStateLocked):
		log.V(1).Info("memory limit not applied yet: the state file is locked", "limit", st.MemoryMax)
	case err != nil:
		log.Error(err, "apply memory limit")
	case n > 0:
		log.V(1).Info("memory limit applied to running processes", "limit", st.MemoryMax, "gpus", n)
	}
}

// retryLimits applies the memory limits a held lock kept out.
func (s *Server) retryLimits() {
	s.mu.Lock()
	names := slices.Collect(maps.Keys(s.unapplied))
	s.mu.Unlock()
	for _, n := range names {
		if s.settingsOf(n).MemoryMin != 0 { // elastic now: the daemon's ledger sets its slots
			s.mu.Lock()
			delete(s.unapplied, n)
			s.mu.Unlock()
			continue
		}
		s.applyMemoryLimit(s.log.WithValues("group", n), n)
	}
}

// memoryOf sums a group's GPU memory use from its state file, after
// releasing what dead members still held (each status refresh).
func (s *Server) memoryOf(name string) (used uint64, ok bool) {
	path := paths.GroupStateFile(s.cfg.RunDir, name)
	if n, err := ReapDead(s.cfg.ProcRoot, path); err == nil && n > 0 {
		s.log.V(1).Info("released the memory of dead members", "group", name, "members", n)
	}
	gpus, err := readMemory(path)
	if err != nil {
		return 0, false
	}
	s.checkLimits(name, gpus)
	for _, g := range gpus {
		used += g.Used
	}
	return used, true
}

// checkLimits puts the group's memory.max back into its state file where a
// member changed it: the members map the file writable (their counts live
// there), but its limits are the node's. Elastic groups' slots are the
// ledger's (applyElastic); groups without settings are not the daemon's.
func (s *Server) checkLimits(name string, gpus []gpuMemory) {
	s.mu.Lock()
	st, known := s.settings[name]
	s.mu.Unlock()
	if !known || st.MemoryMin != 0 {
		return
	}
	for _, g := range gpus {
		if g.Limit != st.MemoryMax {
			s.log.Info("a member changed its group's memory limit in the state file: restored", "group", name,
				"gpu", g.UUID, "found", g.Limit, "limit", st.MemoryMax)
			s.applyMemoryLimit(s.log.WithValues("group", name), name)
			return
		}
	}
}

// memoryByGPU returns a group's GPU memory slots by GPU UUID (upper case).
func (s *Server) memoryByGPU(name string) map[string]gpuMemory {
	gpus, err := readMemory(paths.GroupStateFile(s.cfg.RunDir, name))
	if err != nil {
		return nil
	}
	out := make(map[string]gpuMemory, len(gpus))
	for _, g := range gpus {
		out[strings.ToUpper(g.UUID)] = g
	}
	return out
}

// settingsOf returns the last valid settings of a group.
func (s *Server) settingsOf(name string) group.Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings[name]
}

// PrepareGroupState makes the group's state file before any member starts and
// writes the group's memory.max into it: every member is held to it,
// whatever its own environment says. With adopt (a named group), a state its
// live members still use after the run directory was replaced is taken back,
// not made anew (a run's own group, run-<pid>, has no members before the run:
// the surviving children of an earlier run with that pid are not its own). Elastic groups (memory.min) get their
// limits from the daemon.
func PrepareGroupState(runDir, name string, st group.Settings, adopt bool) error {
	path := paths.GroupStateFile(runDir, name)
	if adopt {
		if err := adoptOrphanedState("/proc", path); err != nil { // one group, one state (orphan.go)
			return fmt.Errorf("group %s: %w", name, err)
		}
	}
	if err := createGroupState("/proc", path, name, 0o600); err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	if st.MemoryMin != 0 {
		return nil
	}
	if _, err := SetGroupLimit(path, st.MemoryMax); err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	return nil
}
