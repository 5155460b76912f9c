package identity

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// maxDeviceDirs bounds the entries read of a caller's
// groupstate.ContainerDevicesDir (a container holds a few GPUs; a caller
// filling its own directory makes the daemon read no more than this).
const maxDeviceDirs = 64

// deviceName is a GPU's (or MIG instance's) UUID as NVML spells it.
var deviceName = regexp.MustCompile(`^(GPU|MIG)-[0-9a-fA-F-]{1,59}$`)

// DeviceGroups finds, for a caller in a pod container naming several DRA
// claims, the group of each GPU: the node mounts each claim's group
// directory read-only at groupstate.ContainerDeviceDir(<UUID>) for each of
// its GPUs. The answer maps the UUID's hex digits and dashes (lower case,
// without the "GPU-" or "MIG-" prefix: the launch gate names a MIG instance
// by its own 16 bytes) to the group of this daemon's tree whose
// directory the caller sees there (resolved inside its root, as
// groupFileAllowed checks it, which must also accept it); a GPU the caller
// sees no such directory for is not in the answer (its group is the
// caller's, Peer.Group). A caller without the directory gets an empty answer.
func DeviceGroups(procRoot string, tree group.Tree, p Peer) (map[string]string, error) {
	proc := filepath.Join(procRoot, strconv.Itoa(int(p.PID)))
	entries, dir, err := deviceDirs(proc)
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	defer func() { _ = unix.Close(dir) }() //nolint:errcheck // a read-only descriptor
	byDir, err := treeDirs(tree)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, u := range entries {
		var st unix.Stat_t
		if !deviceName.MatchString(u) || unix.Fstatat(dir, u, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		name, ok := byDir[[2]uint64{st.Dev, st.Ino}]
		if !ok || groupFileAllowed(procRoot, tree, p, name, groupstate.ContainerDeviceFile(u)) != nil {
			continue
		}
		out[strings.ToLower(u[4:])] = name
	}
	return out, nil
}

// deviceDirs opens the caller's groupstate.ContainerDevicesDir (inside its
// root) and lists at most maxDeviceDirs entries; none (and no descriptor)
// where it has none.
func deviceDirs(proc string) ([]string, int, error) {
	root, err := unix.Open(filepath.Join(proc, "root"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("device groups: %w", err)
	}
	defer func() { _ = unix.Close(root) }() //nolint:errcheck // an O_PATH descriptor
	fd, err := unix.Openat2(root, groupstate.ContainerDevicesDir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil, -1, nil
	}
	if err != nil {
		return nil, -1, fmt.Errorf("device groups: %s: %w", groupstate.ContainerDevicesDir, err)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		_ = unix.Close(fd) //nolint:errcheck // closing on the error path
		return nil, -1, fmt.Errorf("device groups: %w", err)
	}
	f := os.NewFile(uintptr(dup), groupstate.ContainerDevicesDir)
	names, rerr := f.Readdirnames(maxDeviceDirs)
	if err := errors.Join(f.Close(), ignoreEOF(rerr)); err != nil {
		_ = unix.Close(fd) //nolint:errcheck // closing on the error path
		return nil, -1, fmt.Errorf("device groups: %w", err)
	}
	return names, fd, nil
}

// ignoreEOF: an empty directory reads as io.EOF.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// treeDirs maps each group directory of the tree (device, inode) to its name.
func treeDirs(tree group.Tree) (map[[2]uint64]string, error) {
	names, err := tree.List()
	if err != nil {
		return nil, fmt.Errorf("device groups: %w", err)
	}
	out := make(map[[2]uint64]string, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if unix.Stat(tree.Path(n), &st) == nil {
			out[[2]uint64{st.Dev, st.Ino}] = n
		}
	}
	return out, nil
}
