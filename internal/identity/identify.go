// Package identity is process identity for the time-slice daemon: who a
// caller is as the kernel says (SO_PEERCRED, /proc/<pid>/cgroup, the group
// file it was started with), how a process of another pid namespace appears
// on the host (NSpid, start time), whether a group state file's members still
// run (reaping the dead ones), and a state file live members still map after
// the run directory was replaced. It holds no state of its own: every answer
// is read from /proc (procRoot) and the group state files (internal/groupstate).
package identity

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/paths"
)

// Peer is a caller as the kernel identifies it.
type Peer struct {
	PID     int32
	UID     uint32
	GID     uint32
	Cgroups []string // every cgroup path of the process (v2 and v1 hierarchies)
	Group   string
	// Via says how the group was found: "cgroup", "group-file" or "default".
	Via string
	// Refused says why the group file the caller was started with was not
	// accepted ("" if none was named, or it was accepted).
	Refused string
}

// Bounds on what is read of a caller's /proc files (the kernel bounds them
// too, but a process chooses the size of its environment).
const (
	maxCgroupFile = 64 << 10
	maxEnviron    = 1 << 20
	maxEnvEntry   = 64 << 10
)

// PeerCred reads SO_PEERCRED of a connected unix socket.
func PeerCred(fd int) (*unix.Ucred, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return cred, nil
}

// parseCgroups returns the paths of a /proc/<pid>/cgroup file.
func parseCgroups(b []byte) []string {
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], "/") {
			out = append(out, parts[2])
		}
	}
	return out
}

// readCgroups reads /proc/<pid>/cgroup, at most maxCgroupFile bytes.
func readCgroups(proc string) ([]string, error) {
	f, err := os.Open(filepath.Join(proc, "cgroup"))
	if err != nil {
		return nil, err
	}
	b, rerr := io.ReadAll(io.LimitReader(f, maxCgroupFile))
	if err := errors.Join(rerr, f.Close()); err != nil {
		return nil, err
	}
	return parseCgroups(b), nil
}

// parseEnviron returns the value of key in a /proc/<pid>/environ stream,
// reading at most maxEnviron bytes and skipping entries over maxEnvEntry.
func parseEnviron(r io.Reader, key string) string {
	sc := bufio.NewScanner(io.LimitReader(r, maxEnviron))
	sc.Buffer(make([]byte, 0, 4096), maxEnvEntry)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, 0); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), data, nil
		}
		return 0, nil, nil
	})
	prefix := []byte(key + "=")
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), prefix); ok {
			return string(v)
		}
	}
	return "" // a read error or an entry too long: as if unset
}

// Identify finds the group of a caller from what the kernel says about it:
//   - a group bound to one of its cgroups (the binding counts if the group's
//     directory belongs to root or to the caller);
//   - else the group file it was started with (GPUSLICE_GROUP_FILE in
//     /proc/<pid>/environ), if the kernel confirms it may act for that group
//     (groupFileAllowed);
//   - else a group of its own, "pid-<pid>".
func Identify(procRoot string, tree group.Tree, cred *unix.Ucred) (Peer, error) {
	p := Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}
	proc := filepath.Join(procRoot, strconv.Itoa(int(cred.Pid)))
	cgs, err := readCgroups(proc)
	if err != nil {
		return p, fmt.Errorf("identify pid %d: %w", cred.Pid, err)
	}
	p.Cgroups = cgs
	if name := BoundGroup(tree, p.Cgroups, p.UID); name != "" {
		p.Group, p.Via = name, "cgroup"
		return p, nil
	}
	// environ is readable by root or the same user; without it the caller
	// simply gets a group of its own.
	if f, err := os.Open(filepath.Join(proc, "environ")); err == nil {
		file := parseEnviron(f, "GPUSLICE_GROUP_FILE")
		if err := f.Close(); err != nil {
			return p, fmt.Errorf("identify pid %d: %w", cred.Pid, err)
		}
		if name := groupOfFile(tree, file); name != "" {
			if err := groupFileAllowed(procRoot, tree, p, name, file); err != nil {
				p.Refused = err.Error()
			} else {
				p.Group, p.Via = name, "group-file"
				return p, nil
			}
		}
	}
	p.Group, p.Via = "pid-"+strconv.Itoa(int(cred.Pid)), "default"
	return p, nil
}

// groupFileAllowed decides whether a caller started with group file file
// (which names group name of this daemon's tree) may act for that group. The
// environment is the caller's own choice; the kernel decides:
//   - the group's directory must be what the caller sees at that path,
//     resolved inside the caller's root (viewOf): a container sees only the
//     group directory mounted into it, so it cannot name another container's
//     group;
//   - the caller must own the group's directory, or be root: users cannot
//     join each other's groups. Unless its mount namespace is not the
//     daemon's and its user namespace is (a container: a view made with
//     privilege); a mount namespace of a user namespace of its own is any
//     user's to make, and shows it what it could see anyway.
func groupFileAllowed(procRoot string, tree group.Tree, p Peer, name, file string) error {
	var host, seen unix.Stat_t
	dir := tree.Path(name)
	if err := unix.Stat(dir, &host); err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	proc := filepath.Join(procRoot, strconv.Itoa(int(p.PID)))
	if err := viewOf(proc, filepath.Dir(filepath.Clean(file)), &seen); err != nil {
		return fmt.Errorf("group %s: the caller's view of %s: %w", name, filepath.Dir(file), err)
	}
	if seen.Dev != host.Dev || seen.Ino != host.Ino {
		return fmt.Errorf("group %s: the caller sees another directory at %s", name, filepath.Dir(file))
	}
	sameMnt, err := sameNamespace(procRoot, p.PID, "mnt")
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	sameUser, err := sameNamespace(procRoot, p.PID, "user")
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	if (sameMnt || !sameUser) && p.UID != 0 && p.UID != host.Uid {
		return fmt.Errorf("group %s belongs to uid %d, the caller is uid %d", name, host.Uid, p.UID)
	}
	return nil
}

// viewOf stats dir as the process at proc sees it: resolved inside its root
// (proc/root), symbolic links included (openat2 RESOLVE_IN_ROOT). A plain
// stat through proc/root resolves an absolute link there in the daemon's
// root: a link made by the caller would name any directory of the host.
func viewOf(proc, dir string, st *unix.Stat_t) error {
	root, err := unix.Open(filepath.Join(proc, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(root) }() //nolint:errcheck // an O_PATH descriptor
	fd, err := unix.Openat2(root, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }() //nolint:errcheck // an O_PATH descriptor
	return unix.Fstat(fd, st)
}

// sameNamespace reports whether pid is in the daemon's namespace of kind
// (e.g. "mnt"), as procRoot shows them (procRoot/self is the daemon).
func sameNamespace(procRoot string, pid int32, kind string) (bool, error) {
	var mine, theirs unix.Stat_t
	if err := unix.Stat(filepath.Join(procRoot, "self", "ns", kind), &mine); err != nil {
		return false, fmt.Errorf("own %s namespace: %w", kind, err)
	}
	if err := unix.Stat(filepath.Join(procRoot, strconv.Itoa(int(pid)), "ns", kind), &theirs); err != nil {
		return false, fmt.Errorf("%s namespace of pid %d: %w", kind, pid, err)
	}
	return mine.Dev == theirs.Dev && mine.Ino == theirs.Ino, nil
}

// groupOfFile maps <tree>/<name>/groupstate.FileName to name.
func groupOfFile(tree group.Tree, file string) string {
	if file == "" || filepath.Base(file) != groupstate.FileName {
		return ""
	}
	dir := filepath.Clean(filepath.Dir(file))
	if filepath.Dir(dir) != filepath.Clean(tree.Dir) {
		return ""
	}
	name := filepath.Base(dir)
	if paths.ValidateGroup(name) != nil {
		return ""
	}
	return name
}

// BoundGroup returns the group whose cgroup binding is the longest prefix of
// one of the caller's cgroup paths. A binding counts only in a group
// directory owned by root or by the caller: a user cannot pull other users'
// processes (or containers) into a group of theirs.
func BoundGroup(tree group.Tree, cgroups []string, uid uint32) string {
	names, err := tree.List()
	if err != nil {
		return ""
	}
	best, bestLen := "", 0
	for _, n := range names {
		b := strings.TrimSuffix(tree.Cgroup(n), "/")
		if b == "" || len(b) <= bestLen {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(tree.Path(n), &st) != nil || (st.Uid != 0 && st.Uid != uid) {
			continue
		}
		for _, c := range cgroups {
			if c == b || strings.HasPrefix(c, b+"/") {
				best, bestLen = n, len(b)
			}
		}
	}
	return best
}
