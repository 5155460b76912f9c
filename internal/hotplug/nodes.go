// Package hotplug changes which GPU device nodes a running container can
// use, without restarting it: it creates and removes the nodes inside the
// container's mount namespace and allows or denies them in the container's
// device cgroup (v1 devices.allow/deny, or a BPF_PROG_TYPE_CGROUP_DEVICE
// program on cgroup v2). Every change goes from the state it reads back from
// the kernel to the state asked for, so repeating it is harmless and an agent
// restarted mid-change finishes the job without leaking rules or programs.
// The decisions are internal/devices'; this package only does system calls.
package hotplug

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/devices"
)

// ErrForeignNode wraps a managed path that exists in the container but is not
// the device node the agent would create there; it is left alone.
var ErrForeignNode = errors.New("path in the container is not our device node")

// Node is a device node the agent manages in containers.
type Node struct {
	// Path is absolute inside the container, e.g. /dev/nvidia1.
	Path   string
	Device devices.Device
	// Mode is the node's permission bits (e.g. 0o666).
	Mode uint32
}

// resolveFlags keep every lookup inside the container's root: absolute
// symlinks and ".." resolve against it, and no symlink or magic link is
// followed at all.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS

// SyncNodes makes the managed device nodes in the mount namespace of pid
// match want (keyed by Path): wanted nodes are created, unwanted ones removed
// (only when they are exactly the device node we would create). It enters the
// namespace through /proc/<pid>/root and resolves each path inside that root
// with openat2, so a container cannot redirect it with symlinks.
func SyncNodes(procRoot string, pid int, managed []Node, want map[string]bool) (changed bool, err error) {
	root, err := unix.Open(path.Join(procRoot, strconv.Itoa(pid), "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("enter mount namespace of pid %d: %w", pid, err)
	}
	defer closeFD(root)
	var errs []error
	for _, n := range managed {
		c, err := syncNode(root, n, want[n.Path])
		changed = changed || c
		if err != nil {
			errs = append(errs, fmt.Errorf("pid %d: %s: %w", pid, n.Path, err))
		}
	}
	return changed, errors.Join(errs...)
}

func closeFD(fd int) { _ = unix.Close(fd) } // a close error on an O_PATH fd means nothing

func syncNode(root int, n Node, want bool) (bool, error) {
	if !path.IsAbs(n.Path) || path.Clean(n.Path) != n.Path || n.Path == "/" {
		return false, fmt.Errorf("path must be absolute and clean")
	}
	dir, err := unix.Openat2(root, path.Dir(n.Path)[1:]+"/.", &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path.Dir(n.Path), err)
	}
	defer closeFD(dir)
	base := path.Base(n.Path)
	var st unix.Stat_t
	err = unix.Fstatat(dir, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		if !want {
			return false, nil
		}
		return true, createNode(dir, base, n)
	case err != nil:
		return false, fmt.Errorf("stat: %w", err)
	}
	ours := st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(n.Device.Major, n.Device.Minor)
	switch {
	case !ours && want:
		return false, fmt.Errorf("%w (mode %#o, rdev %d:%d)", ErrForeignNode, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case !ours:
		return false, nil
	case want && st.Mode&0o7777 == n.Mode:
		return false, nil
	case want:
		return true, chmodNode(dir, base, n)
	}
	if err := unix.Unlinkat(dir, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, fmt.Errorf("remove: %w", err)
	}
	return true, nil
}

func createNode(dir int, base string, n Node) error {
	if n.Device.Type != devices.TypeChar && n.Device.Type != devices.TypeBlock {
		return fmt.Errorf("device type %q", n.Device.Type)
	}
	kind := uint32(unix.S_IFCHR)
	if n.Device.Type == devices.TypeBlock {
		kind = unix.S_IFBLK
	}
	err := unix.Mknodat(dir, base, kind|n.Mode, int(unix.Mkdev(n.Device.Major, n.Device.Minor)))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mknod: %w", err)
	}
	// The umask applied to mknod; set the mode on the node itself.
	return chmodNode(dir, base, n)
}

// chmodNode sets the mode through an O_PATH descriptor of the node (never
// following a symlink swapped in meanwhile).
func chmodNode(dir int, base string, n Node) error {
	fd, err := unix.Openat2(dir, base, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		return fmt.Errorf("open node: %w", err)
	}
	defer closeFD(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat node: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK || st.Rdev != unix.Mkdev(n.Device.Major, n.Device.Minor) {
		return fmt.Errorf("%w: replaced while being created", ErrForeignNode)
	}
	if err := os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), os.FileMode(n.Mode)); err != nil {
		return fmt.Errorf("chmod node: %w", err)
	}
	return nil
}
