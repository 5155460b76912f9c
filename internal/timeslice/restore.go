package timeslice

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
)

// forgetGoneAfter is how long the daemon keeps what it holds for a group whose
// directory went while its run directory stayed, other than by its owner's
// removal (groupRemoved): a run directory removed under it (rm -r) takes its
// groups first, and the daemon restores them from what it kept once it sees
// the run directory gone (reachCheckEvery).
const forgetGoneAfter = time.Second

// keptFiles are a group's files besides its settings that the daemon keeps to
// restore a lost group: written by the groups manager (its GPUs, gate-off) and
// the node agent (its cgroup binding).
func keptFiles() []string { return []string{group.FileCgroup, group.FileGPUs, group.FileGateOff} }

// groupRecord is what the daemon keeps of a group to make it again if its
// run directory is lost.
type groupRecord struct {
	files    map[string]string // keptFiles present, as last read
	uid, gid int               // the directory's owner
	// settings and gen: the last valid settings read with every setting file
	// in place, and their generation (complete: any were).
	settings group.Settings
	gen      uint64
	complete bool
}

// recordGroup keeps a group's files, owner and settings st (valid: read
// without error) with their generation gen, each time its files change. What
// is read while the group is being removed (rm -r under a change the daemon
// reads meanwhile: missing files read as defaults) is not kept: settings only
// from a read with every setting file in place (the groups manager writes
// them all; a file is replaced by a rename, never missing), and a kept file
// once seen stays (their writers never remove one alone). It reports such a
// read (valid, but a setting file missing after a read with all of them).
func (s *Server) recordGroup(name string, st group.Settings, gen uint64, valid bool) (vanishing bool) {
	fi, err := os.Stat(s.tree.Path(name))
	if err != nil {
		return false
	}
	r := groupRecord{files: map[string]string{}, uid: -1, gid: -1}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		r.uid, r.gid = int(sys.Uid), int(sys.Gid)
	}
	for _, f := range keptFiles() {
		if v, err := s.tree.ReadFile(name, f); err == nil {
			r.files[f] = v + "\n"
		}
	}
	complete := valid && s.allSettingFiles(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.records[name]
	for f, v := range prev.files {
		if _, ok := r.files[f]; !ok {
			r.files[f] = v
		}
	}
	r.settings, r.gen, r.complete = prev.settings, prev.gen, prev.complete
	if complete {
		r.settings, r.gen, r.complete = st, gen, true
	}
	s.records[name] = r
	return valid && !complete && prev.complete
}

// allSettingFiles reports whether every setting file of a group is there.
func (s *Server) allSettingFiles(name string) bool {
	for _, f := range group.SettingFiles() {
		if _, err := os.Lstat(filepath.Join(s.tree.Path(name), f)); err != nil {
			return false
		}
	}
	return true
}

// groupGone notes that a known group's directory went (under s.mu): forgotten
// after forgetGoneAfter unless its run directory turns out lost with it.
func (s *Server) groupGoneLocked(name string, now time.Time) {
	if _, known := s.dirs[name]; !known {
		return
	}
	if _, already := s.gone[name]; !already {
		s.gone[name] = now
	}
}

// groupRemoved forgets at once a group its owner removed (group.Tree.Remove),
// unless one was made again under its name meanwhile: it is never restored.
func (s *Server) groupRemoved(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tree.Exists(name) {
		s.forgetLocked(name)
	}
}

// forgetGone forgets the groups gone for forgetGoneAfter (the run directory
// in place): removed by their owner.
func (s *Server) forgetGone(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, at := range s.gone {
		if now.Sub(at) < forgetGoneAfter {
			continue
		}
		delete(s.gone, name)
		if !s.tree.Exists(name) {
			s.forgetLocked(name)
		}
	}
}

// restoreGroups makes again, in a run directory made again, every group the
// daemon held that is missing there, with its last valid settings (as read
// complete, else as in force), the generation they were read with, its kept
// files and its owner; the new
// watcher then applies them as new groups. A group's state file is not made:
// its running members map the one removed with the directory (their limit
// holds), and a second would give the group a second limit (the groups
// manager refuses a new member while they live: identity.AdoptOrphanedState).
// It returns the number restored.
func (s *Server) restoreGroups() int {
	s.mu.Lock()
	recs := maps.Clone(s.records)
	settings := maps.Clone(s.settings)
	gens := maps.Clone(s.generations)
	s.mu.Unlock()
	n := 0
	for name, r := range recs {
		st, ok := settings[name]
		if !ok || s.tree.Exists(name) {
			continue
		}
		g := gens[name]
		if r.complete {
			st, g = r.settings, r.gen
		}
		files := maps.Clone(r.files)
		if g != 0 {
			files[group.FileGeneration] = strconv.FormatUint(g, 10) + "\n"
		}
		uid, gid := r.uid, r.gid
		if os.Geteuid() != 0 {
			uid, gid = -1, -1 // made as this user: the only owner it can give
		}
		err := s.tree.Restore(name, st, files, uid, gid)
		switch {
		case err == nil:
			n++
			s.log.Info("group restored into the run directory made again", "group", name)
		case !errors.Is(err, fs.ErrExist):
			s.log.Error(err, "restore group", "group", name)
		}
	}
	return n
}
