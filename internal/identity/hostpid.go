package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// A process in a pid namespace of its own (a container without hostPID)
// cannot know its host pid, which is how NVML names it; the library leaves
// host_pid 0 in its group file entry and says hello to the daemon (at its
// first allocation, and the gate at its first launch). The daemon sees the
// caller's host pid through SO_PEERCRED, finds its pid in its own namespace
// from /proc/<pid>/status (NSpid), and fills the entry in.

// InNamespace is how a process appears in its own pid namespace.
type InNamespace struct {
	PID   int32  // innermost NSpid value
	NS    uint64 // inode of /proc/<pid>/ns/pid
	Start uint64 // /proc/<pid>/stat field 22
	// Nested: the process is in a namespace below procRoot's.
	Nested bool
}

// ParseNSpid returns the NSpid values of a /proc/<pid>/status file.
func ParseNSpid(status []byte) ([]int32, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		var out []int32
		for _, f := range strings.Fields(rest) {
			v, err := strconv.ParseInt(f, 10, 32)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("NSpid %q: bad pid", rest)
			}
			out = append(out, int32(v))
		}
		if len(out) == 0 {
			return nil, errors.New("NSpid is empty")
		}
		return out, nil
	}
	return nil, errors.New("no NSpid line (kernel older than 4.1)")
}

// parseStartTime returns field 22 of a /proc/<pid>/stat file.
func parseStartTime(stat []byte) (uint64, error) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("stat: no comm")
	}
	f := strings.Fields(s[i+1:]) // fields 3...
	if len(f) < 20 {
		return 0, errors.New("stat: too few fields")
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: start time: %w", err)
	}
	return v, nil
}

// Of reads how host pid pid appears in its own namespace.
func Of(procRoot string, pid int32) (InNamespace, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(int(pid)))
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return InNamespace{}, err
	}
	ids, err := ParseNSpid(status)
	if err != nil {
		return InNamespace{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	id := InNamespace{PID: ids[len(ids)-1], Nested: len(ids) > 1}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "ns", "pid"), &st); err != nil {
		return InNamespace{}, fmt.Errorf("pid %d: pid namespace: %w", pid, err)
	}
	id.NS = st.Ino
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return InNamespace{}, err
	}
	if id.Start, err = parseStartTime(stat); err != nil {
		return InNamespace{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return id, nil
}

// MapHostPID records a caller's host pid in its group's state file when the
// caller lives in a pid namespace below the daemon's. It reports whether an
// entry was filled; a group without a state file, or a caller that has not
// attached to it yet, is not an error.
func MapHostPID(procRoot string, tree group.Tree, p Peer) (bool, error) {
	path := filepath.Join(tree.Path(p.Group), groupstate.FileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	id, err := Of(procRoot, p.PID)
	if err != nil || !id.Nested {
		return false, err
	}
	ok, err := groupstate.SetHostPID(path, id.PID, id.NS, id.Start, p.PID)
	if err != nil {
		return false, fmt.Errorf("host pid of %d in group %s: %w", p.PID, p.Group, err)
	}
	return ok, nil
}
