package timeslice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/identity"
)

// loadGroups applies the settings of every group already in the tree.
func (s *Server) loadGroups(ctx context.Context) error {
	names, err := s.tree.List()
	if err != nil {
		return fmt.Errorf("read group tree: %w", err)
	}
	s.primeSeed(names)
	for _, n := range names {
		s.groupChanged(ctx, n)
	}
	return nil
}

// groupChanged applies a group's settings after its files changed. Invalid
// settings change nothing: the last valid ones stay in force and are written
// back to the files (for a group never seen valid, its valid files are kept
// and the invalid ones reset to their defaults; the write-back's own events
// then apply them). The settings generation is read before the settings (a
// writer numbers its settings after writing them), and written back as
// applied once the settings and the memory limit are in force.
func (s *Server) groupChanged(ctx context.Context, name string) {
	log := klog.FromContext(ctx).WithValues("group", name)
	if !s.noteGroupDir(ctx, name) {
		return
	}
	d := s.openGenDir(name)           // nil: gone again, its removal's event forgets it
	gen, _ := s.tree.Generation(name) // missing or unreadable: 0, nothing to acknowledge
	st, err := s.tree.Read(name)
	if s.recordGroup(name, st, gen, err == nil) {
		// A setting file it had is missing: the group is being removed
		// (rm -r); its defaults are not its settings, nor its limit.
		log.V(1).Info("setting files missing: the group is being removed; nothing applied")
		closeDir(d)
		s.dropGenDir(name)
		return
	}
	s.mu.Lock()
	old, known := s.settings[name]
	lastGen := s.generations[name]
	if err == nil {
		// The directory with the generation read from it, under one lock: an
		// acknowledgement (the publish goroutine's too) sees both or neither.
		s.settings[name] = st
		s.generations[name] = gen
		s.setGenDirLocked(name, d)
	}
	gpus := make([]*gpuState, 0, len(s.gpus))
	for _, g := range s.gpus {
		gpus = append(gpus, g)
	}
	s.mu.Unlock()
	if err != nil {
		closeDir(d)
		log.Error(err, "invalid group settings ignored; restoring the last valid ones")
		if !known { // none seen yet: keep the valid files, reset the others
			old = s.tree.ReadValid(name)
		}
		if werr := s.tree.Write(name, old); werr != nil {
			log.Error(werr, "restore group settings")
		}
		s.dropGenDir(name)
		return
	}
	if known && old == st && gen == lastGen && s.applied(name) == gen {
		return
	}
	if !known || old != st {
		for _, g := range gpus {
			if err := g.update(name, st.Params()); err != nil {
				log.Error(err, "apply group settings", "gpu", g.uuid.String())
			}
		}
	}
	if !known {
		s.checkLimitsAtStart(s.log, name, st, gen)
	}
	// A new generation writes the header's limit again (its state file may be
	// newer than the settings); an elastic group's slots only when its memory
	// settings change (their allowances hold what was lent).
	memChanged := !known || old.MemoryMax != st.MemoryMax || old.MemoryMin != st.MemoryMin || old.MemorySpill != st.MemorySpill
	s.applyMemoryLimit(log, name, memChanged)
	log.V(1).Info("group settings applied", "slice", st.Slice, "share", st.Share, "priority", st.Priority,
		"memoryMax", st.MemoryMax, "generation", gen)
}

// openGenDir opens the group's directory before its generation is read: the
// generation is acknowledged into it (acknowledge), never into another made
// under the name meanwhile. nil: the directory is gone.
func (s *Server) openGenDir(name string) *os.File {
	d, err := s.tree.OpenDir(name)
	if err != nil {
		return nil
	}
	if s.hooks.genDirOpened != nil {
		s.hooks.genDirOpened(name)
	}
	return d
}

// setGenDirLocked keeps d as the directory the group's generation was just
// read from (under s.mu), closing the one it replaces.
func (s *Server) setGenDirLocked(name string, d *os.File) {
	old := s.genDirs[name]
	if old == d {
		return
	}
	closeDir(old)
	if d == nil {
		delete(s.genDirs, name)
		return
	}
	s.genDirs[name] = d
}

// closeDir closes a directory opened read-only (nil: none).
func closeDir(d *os.File) {
	if d != nil {
		_ = d.Close() // read-only
	}
}

// dropGenDir closes the group's directory opened for a generation that needs
// no acknowledgement.
func (s *Server) dropGenDir(name string) {
	s.mu.Lock()
	d := s.genDirs[name]
	s.mu.Unlock()
	if d != nil {
		s.closeGenDir(name, d)
	}
}

// closeGenDir closes the group's directory d once acknowledged into, unless
// a newer generation's replaced it meanwhile (that one closed it).
func (s *Server) closeGenDir(name string, d *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.genDirs[name] == d {
		delete(s.genDirs, name)
		_ = d.Close() // read-only
	}
}

// noteGroupDir notes what a changed group's directory is, and reports
// whether it exists. A group gone is forgotten unless its run directory went
// with it (restore.go); one removed and made again (another directory) starts
// clean.
func (s *Server) noteGroupDir(ctx context.Context, name string) bool {
	id, exists := s.groupDir(name)
	s.bindingChanged(ctx, name, exists)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !exists {
		s.groupGoneLocked(name, time.Now())
		return false
	}
	if prev, seen := s.dirs[name]; seen && prev != id {
		s.forgetLocked(name)
	}
	s.dirs[name] = id
	delete(s.gone, name)
	return true
}

// groupDir returns what a group's directory is (device and inode), and
// whether it exists.
func (s *Server) groupDir(name string) (dirID, bool) {
	var st unix.Stat_t
	if err := unix.Stat(s.tree.Path(name), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirID{}, false
	}
	return dirID{dev: st.Dev, ino: st.Ino}, true
}

// forgetLocked drops everything the daemon holds for a group that was
// removed (under s.mu): its settings, the generation read with them, a limit
// waiting to be written. A group made again under the same name starts clean.
func (s *Server) forgetLocked(name string) {
	s.setGenDirLocked(name, nil)
	delete(s.settings, name)
	delete(s.generations, name)
	delete(s.unapplied, name)
	delete(s.dirs, name)
	delete(s.gone, name)
	delete(s.records, name)
	delete(s.seedGiven, name)
	delete(s.devSeedGiven, name)
}

// applyMemoryLimit writes the group's limit into its state file's header (the
// limit every GPU slot a member claims takes) and its GPU slots, so its running
// processes enforce it from their next allocation: memory.max, or for an
// elastic group (memory.min) the guarantee, its slots marked elastic. It then
// acknowledges the group's settings generation (FileApplied). A state file
// whose lock a member holds past groupstate.BriefLockWait, or that a member is still making, is tried again at each status
// refresh (retryLimits): no group's lock holds up the others' settings.
// elasticSlots: an elastic group's slots are set too (else its header only).
func (s *Server) applyMemoryLimit(log klog.Logger, name string, elasticSlots bool) {
	s.limitMu.Lock()
	defer s.limitMu.Unlock()
	// The settings with their generation, under one lock: the generation
	// acknowledged is the one whose limit is written here (a group made again
	// meanwhile has another, which its own groupChanged applies).
	s.mu.Lock()
	st, gen := s.settings[name], s.generations[name]
	s.mu.Unlock()
	if s.hooks.limitRead != nil {
		s.hooks.limitRead(name)
	}
	path := groupstate.Path(s.cfg.RunDir, name)
	s.giveSeed(name, true) // before the limit: the group's first members find it
	var n int
	var err error
	if st.MemoryMin != 0 {
		err = s.applyElastic(path, st, elasticSlots)
	} else {
		n, err = groupstate.SetLimit(path, st.MemoryMax, groupstate.BriefLockWait)
	}
	later := errors.Is(err, groupstate.ErrLocked) || errors.Is(err, groupstate.ErrIncomplete)
	s.mu.Lock()
	if later {
		s.unapplied[name] = struct{}{}
	} else {
		delete(s.unapplied, name)
	}
	s.mu.Unlock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case later: // a member holds the lock, or is making the file (groupstate.ErrIncomplete)
		log.V(1).Info("memory limit not applied yet: the state file is locked or being made", "limit", st.MemoryMax, "reason", err)
		return
	case err != nil:
		log.Error(err, "apply memory limit")
	case n > 0:
		log.V(1).Info("memory limit applied to running processes", "limit", st.MemoryMax, "gpus", n)
	}
	s.acknowledge(log, name, gen)
}

// acknowledge writes the group's last applied settings generation into
// FileApplied, unless the file holds it already. The file, not a number kept
// here, says what is acknowledged: a group removed and made again under the
// same name (faster than its removal is seen, its directory perhaps on the
// same inode) numbers its settings from 1 again, and must be acknowledged
// again.
//
// The acknowledgement goes into the directory the generation was read from
// (opened by groupChanged before reading it: genDirs) and no other: written through that
// directory's descriptor, a late acknowledgement of a removed group never lands
// in a directory made again under its name, whatever numbers the new one's
// settings get (the race TestRemadeGroupApplied caught once). gen is the
// generation whose settings were applied: once the group holds a newer one
// (made again, or set again, meanwhile), nothing is written for gen.
func (s *Server) acknowledge(log klog.Logger, name string, gen uint64) {
	s.mu.Lock()
	cur := s.generations[name]
	dir := s.genDirs[name]
	s.mu.Unlock()
	if dir == nil || gen == 0 || gen != cur || s.applied(name) == gen {
		// Nothing to write: the directory stays open for this generation (a
		// newer one replaces it, the group's removal closes it), so the
		// acknowledgement its own groupChanged makes still has it.
		return
	}
	err := s.tree.WriteFileAt(dir, name, group.FileApplied, strconv.FormatUint(gen, 10)+"\n")
	switch {
	case err == nil:
		s.closeGenDir(name, dir) // one descriptor per group only until acknowledged
	case errors.Is(err, os.ErrClosed) || errors.Is(err, fs.ErrNotExist):
		log.V(1).Info("group removed or made again: the earlier directory's settings not acknowledged", "generation", gen)
		s.closeGenDir(name, dir)
	case s.tree.Exists(name):
		log.Error(err, "acknowledge group settings", "generation", gen)
	}
}

// applied is the settings generation a group's FileApplied holds (0: none).
func (s *Server) applied(name string) uint64 {
	n, err := s.tree.Applied(name)
	if err != nil {
		return 0
	}
	return n
}

// retryLimits applies the memory limits a held lock kept out.
func (s *Server) retryLimits() {
	s.mu.Lock()
	names := slices.Collect(maps.Keys(s.unapplied))
	s.mu.Unlock()
	for _, n := range names {
		s.applyMemoryLimit(s.log.WithValues("group", n), n, false)
	}
}

// memoryOf sums a group's GPU memory use from its state file, after
// releasing what dead members still held (each status refresh).
func (s *Server) memoryOf(name string) (used uint64, ok bool) {
	path := groupstate.Path(s.cfg.RunDir, name)
	if n, err := identity.ReapDead(s.cfg.ProcRoot, path); err == nil && n > 0 {
		s.log.V(1).Info("released the memory of dead members", "group", name, "members", n)
	}
	gpus, err := groupstate.ReadMemory(path)
	if err != nil {
		return 0, false
	}
	s.checkLimits(name, gpus)
	s.seeGroupContexts(name, gpus)
	for _, g := range gpus {
		used += g.Used
	}
	return used, true
}

// checkLimits puts the group's limit back into its state file where anyone
// but the daemon changed it, in a GPU slot (members map the file writable:
// their counts live there) or in the header: its limits are the node's, and
// the daemon alone writes them. Groups without settings are not the daemon's.
func (s *Server) checkLimits(name string, gpus []groupstate.GPUMemory) {
	s.mu.Lock()
	st, known := s.settings[name]
	_, pending := s.unapplied[name]
	s.mu.Unlock()
	if !known || pending {
		return
	}
	path := groupstate.Path(s.cfg.RunDir, name)
	if _, set, err := groupstate.HeaderLimit(path); err == nil && !set { // a state file made after the settings were applied
		s.log.V(1).Info("the group's memory limit written into its new state file", "group", name, "limit", limitOf(st))
		s.applyMemoryLimit(s.log.WithValues("group", name), name, true)
		return
	}
	if where, found, ok := foreignLimit(path, st, gpus); ok {
		logRestored(s.log, name, where, found, limitOf(st))
		s.applyMemoryLimit(s.log.WithValues("group", name), name, false)
	}
}

// checkLimitsAtStart logs, before a new daemon applies a group's settings,
// a limit another writer put into the group's state file while no daemon
// ran: the settings' generation was acknowledged by an earlier daemon (it
// wrote that limit), yet the file holds another. Applying puts it back.
func (s *Server) checkLimitsAtStart(log klog.Logger, name string, st group.Settings, gen uint64) {
	if applied, err := s.tree.Applied(name); gen == 0 || err != nil || applied < gen {
		return // new settings: their limit is written for the first time
	}
	path := groupstate.Path(s.cfg.RunDir, name)
	gpus, err := groupstate.ReadMemory(path)
	if err != nil {
		return
	}
	if where, found, ok := foreignLimit(path, st, gpus); ok {
		logRestored(log, name, where, found, limitOf(st), "while", "no daemon ran")
	}
}

// foreignLimit finds where a group's state file (path, its GPU slots gpus)
// holds a limit other than its settings st say: the header (set), or for a
// plain limit a GPU slot (an elastic group's slots are the ledger's,
// applyElastic; its header holds the guarantee).
func foreignLimit(path string, st group.Settings, gpus []groupstate.GPUMemory) (where string, found uint64, ok bool) {
	want := limitOf(st)
	if lim, set, err := groupstate.HeaderLimit(path); err == nil && set && lim != want {
		return "header", lim, true
	}
	if st.MemoryMin != 0 {
		return "", 0, false
	}
	for _, g := range gpus {
		if g.Limit != want {
			return "gpu " + g.UUID, g.Limit, true
		}
	}
	return "", 0, false
}

// limitOf is the limit a group's state file holds: memory.max, or for an
// elastic group (memory.min) the guarantee.
func limitOf(st group.Settings) uint64 {
	if st.MemoryMin != 0 {
		return st.MemoryMin
	}
	return st.MemoryMax
}

// logRestored says that a limit another writer put into a group's state file
// is put back (tests and operators look for "restored").
func logRestored(log klog.Logger, name, where string, found, limit uint64, kv ...any) {
	log.Info("the group's memory limit was changed in its state file by another writer: restored",
		append([]any{"group", name, "where", where, "found", found, "limit", limit}, kv...)...)
}

// memoryByGPU returns a group's GPU memory slots by GPU UUID (upper case).
func (s *Server) memoryByGPU(name string) map[string]groupstate.GPUMemory {
	gpus, err := groupstate.ReadMemory(groupstate.Path(s.cfg.RunDir, name))
	if err != nil {
		return nil
	}
	out := make(map[string]groupstate.GPUMemory, len(gpus))
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
