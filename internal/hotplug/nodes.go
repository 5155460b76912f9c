package hotplug

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"

	devconfig "github.com/opencontainers/cgroups/devices/config"
)

// ErrForeignNode wraps a managed path that exists in the container but is not
// the device node the agent would create there; it is left alone.
var ErrForeignNode = errors.New("path in the container is not our device node")

// resolveFlags keep every lookup inside the container's root: absolute
// symlinks and ".." resolve against it, and no symlink or magic link is
// followed at all.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS

// SyncNodes makes the managed device nodes in the mount namespace of pid
// match want (keyed by Path): wanted nodes are created, unwanted ones removed
// (only when they are exactly the device node we would create). It enters the
// namespace through /proc/<pid>/root and resolves each path inside that root
// with openat2, so a container cannot redirect it with symlinks.
func SyncNodes(procRoot string, pid int, managed []devconfig.Device, want map[string]bool) (changed bool, err error) {
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

// nodeID is the device number and file type of a managed node: a char or
// block device with exact numbers.
func nodeID(n devconfig.Device) (rdev uint64, kind uint32, err error) {
	switch n.Type {
	case devconfig.CharDevice:
		kind = unix.S_IFCHR
	case devconfig.BlockDevice:
		kind = unix.S_IFBLK
	default:
		return 0, 0, fmt.Errorf("%w: device node type %q", ErrInvalidRule, n.Type)
	}
	if n.Major < 0 || n.Major > maxNumber || n.Minor < 0 || n.Minor > maxNumber {
		return 0, 0, fmt.Errorf("%w: device node numbers %d:%d", ErrInvalidRule, n.Major, n.Minor)
	}
	return unix.Mkdev(uint32(n.Major), uint32(n.Minor)), kind, nil
}

func closeFD(fd int) { _ = unix.Close(fd) } // a close error on an O_PATH fd means nothing

func syncNode(root int, n devconfig.Device, want bool) (bool, error) {
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
	rdev, kind, err := nodeID(n)
	if err != nil {
		return false, err
	}
	ours := st.Mode&unix.S_IFMT == kind && st.Rdev == rdev
	switch {
	case !ours && want:
		return false, fmt.Errorf("%w (mode %#o, rdev %d:%d)", ErrForeignNode, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	case !ours:
		return false, nil
	case want && st.Mode&0o7777 == uint32(n.FileMode.Perm()):
		return false, nil
	case want:
		return true, chmodNode(dir, base, n)
	}
	if err := unix.Unlinkat(dir, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return false, fmt.Errorf("remove: %w", err)
	}
	return true, nil
}

func createNode(dir int, base string, n devconfig.Device) error {
	rdev, kind, err := nodeID(n)
	if err != nil {
		return err
	}
	err = unix.Mknodat(dir, base, kind|uint32(n.FileMode.Perm()), int(rdev))
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mknod: %w", err)
	}
	// The umask applied to mknod; set the mode on the node itself.
	return chmodNode(dir, base, n)
}

// chmodNode sets the mode through an O_PATH descriptor of the node (never
// following a symlink swapped in meanwhile).
func chmodNode(dir int, base string, n devconfig.Device) error {
	fd, err := unix.Openat2(dir, base, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		return fmt.Errorf("open node: %w", err)
	}
	defer closeFD(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat node: %w", err)
	}
	rdev, _, err := nodeID(n)
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK || st.Rdev != rdev {
		return fmt.Errorf("%w: replaced while being created", ErrForeignNode)
	}
	if err := os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), n.FileMode.Perm()); err != nil {
		return fmt.Errorf("chmod node: %w", err)
	}
	return nil
}
