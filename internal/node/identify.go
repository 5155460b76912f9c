package node

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
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
}

// peerCred reads SO_PEERCRED of a connected unix socket.
func peerCred(fd int) (*unix.Ucred, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return cred, nil
}

// parseCgroups returns the paths of a /proc/<pid>/cgroup file.
func parseCgroups(b []byte) []string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && strings.HasPrefix(parts[2], "/") {
			out = append(out, parts[2])
		}
	}
	return out
}

// parseEnviron returns the value of key in a /proc/<pid>/environ file.
func parseEnviron(b []byte, key string) string {
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(key+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// identify finds the group of a caller from what the kernel says about it: a
// group bound to one of its cgroups wins; else the group file it was started
// with (GPUSLICE_GROUP_FILE in /proc/<pid>/environ, inside this daemon's group
// tree); else a group of its own, "pid-<pid>".
func identify(procRoot string, tree group.Tree, cred *unix.Ucred) (Peer, error) {
	p := Peer{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}
	proc := filepath.Join(procRoot, strconv.Itoa(int(cred.Pid)))
	cg, err := os.ReadFile(filepath.Join(proc, "cgroup"))
	if err != nil {
		return p, fmt.Errorf("identify pid %d: %w", cred.Pid, err)
	}
	p.Cgroups = parseCgroups(cg)
	if name := boundGroup(tree, p.Cgroups); name != "" {
		p.Group, p.Via = name, "cgroup"
		return p, nil
	}
	// environ is readable by root or the same user; without it the caller
	// simply gets a group of its own.
	if env, err := os.ReadFile(filepath.Join(proc, "environ")); err == nil {
		if name := groupOfFile(tree, parseEnviron(env, "GPUSLICE_GROUP_FILE")); name != "" {
			p.Group, p.Via = name, "group-file"
			return p, nil
		}
	}
	p.Group, p.Via = "pid-"+strconv.Itoa(int(cred.Pid)), "default"
	return p, nil
}

// groupOfFile maps <tree>/<name>/gpu.state to name.
func groupOfFile(tree group.Tree, file string) string {
	if file == "" || filepath.Base(file) != "gpu.state" {
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

// boundGroup returns the group whose cgroup binding is the longest prefix of
// one of the caller's cgroup paths.
func boundGroup(tree group.Tree, cgroups []string) string {
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
		for _, c := range cgroups {
			if c == b || strings.HasPrefix(c, b+"/") {
				best, bestLen = n, len(b)
			}
		}
	}
	return best
}
