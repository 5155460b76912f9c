package identity

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// One group, one state, even across a replaced run directory (docs/timeslice.md,
// "The daemon"): members keep the state file they mapped when the run
// directory is removed or replaced under them. Before a group's state file is
// made anew, the processes started with that file (GPUSLICE_GROUP_FILE, as the
// kernel recorded it at exec) are looked for; if any still maps a state file,
// that file is the group's state: it is linked back in place (the old
// directory was moved aside), or, if it was deleted, no new state is made (a
// second one would give the group a second limit).

// ErrOrphanedState: live members of a group use a state file that was
// deleted with its run directory.
var ErrOrphanedState = errors.New("the group's members use a state file that was removed")

// maxMaps bounds what is read of one /proc/<pid>/maps.
const maxMaps = 4 << 20

// mappedState is a state file a live process maps.
type mappedState struct {
	pid     int
	major   uint32
	minor   uint32
	ino     uint64
	path    string // as the kernel names it now (without " (deleted)")
	deleted bool
}

// AdoptOrphanedState links the state file that live members started with
// GPUSLICE_GROUP_FILE=path still map back to path, if path is gone; nil if
// none does (or path exists). ErrOrphanedState if it was deleted.
func AdoptOrphanedState(procRoot, path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	m, ok := findMappedState(procRoot, path)
	if !ok {
		return nil
	}
	if !m.deleted {
		var st unix.Stat_t
		if err := unix.Stat(m.path, &st); err == nil && st.Ino == m.ino && int(st.Uid) == os.Geteuid() &&
			unix.Major(st.Dev) == m.major && unix.Minor(st.Dev) == m.minor {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			err := os.Link(m.path, path)
			if err == nil || errors.Is(err, fs.ErrExist) {
				return nil
			}
			return fmt.Errorf("%w: pid %d uses %s and it cannot be linked to %s: %w", ErrOrphanedState,
				m.pid, m.path, path, err)
		}
	}
	return fmt.Errorf("%w: pid %d still uses the group's former state file (deleted with its run directory); "+
		"a new one would give the group a second memory limit: start it again when its members have exited",
		ErrOrphanedState, m.pid)
}

// findMappedState finds a live process of this user started with
// GPUSLICE_GROUP_FILE=path that maps a groupstate.FileName file. Only this user's: the
// variable is any process's own choice, and the state file a run makes is
// its user's (mode 0600), so another user's process is no member of it.
func findMappedState(procRoot, path string) (mappedState, bool) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return mappedState{}, false
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		var owner unix.Stat_t
		if unix.Stat(dir, &owner) != nil || int(owner.Uid) != os.Geteuid() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, "environ"))
		if err != nil {
			continue // gone, or not ours to read
		}
		file := parseEnviron(f, "GPUSLICE_GROUP_FILE")
		_ = f.Close() // read-only
		if file != path {
			continue
		}
		if m, ok := stateMapping(filepath.Join(dir, "maps")); ok {
			m.pid = pid
			return m, true
		}
	}
	return mappedState{}, false
}

// stateMapping finds a mapping of a file named groupstate.FileName in a maps file.
func stateMapping(maps string) (mappedState, bool) {
	f, err := os.Open(maps)
	if err != nil {
		return mappedState{}, false
	}
	defer func() { _ = f.Close() }() // read-only
	sc := bufio.NewScanner(io.LimitReader(f, maxMaps))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		if m, ok := parseStateMapping(sc.Text()); ok {
			return m, true
		}
	}
	return mappedState{}, false
}

// parseStateMapping parses one maps line ("start-end perms offset maj:min
// inode path") naming a file groupstate.FileName.
func parseStateMapping(line string) (mappedState, bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return mappedState{}, false
	}
	path := strings.Join(f[5:], " ")
	var m mappedState
	path, m.deleted = strings.CutSuffix(path, " (deleted)")
	if filepath.Base(path) != groupstate.FileName || !filepath.IsAbs(path) {
		return mappedState{}, false
	}
	maj, min, ok := strings.Cut(f[3], ":")
	major, err1 := strconv.ParseUint(maj, 16, 32)
	minor, err2 := strconv.ParseUint(min, 16, 32)
	ino, err3 := strconv.ParseUint(f[4], 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || ino == 0 {
		return mappedState{}, false
	}
	m.major, m.minor, m.ino, m.path = uint32(major), uint32(minor), ino, path
	return m, true
}
