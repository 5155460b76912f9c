// Package paths names the files gpuslice processes share on a node.
package paths

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// RunDir is the node's gpuslice run directory (see docs/contracts.md).
func RunDir(getenv func(string) string) string {
	if d := getenv("GPUSLICE_RUN_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/run/gpuslice"
	}
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "gpuslice")
	}
	return filepath.Join(os.TempDir(), "gpuslice-"+strconv.Itoa(os.Geteuid()))
}

// ErrUnsafeRunDir is wrapped when a run directory could have been made, or
// could be changed, by another user.
var ErrUnsafeRunDir = errors.New("unsafe run directory")

// CheckRunDir refuses a run directory another user may control. The fallback
// /tmp/gpuslice-<uid> is named in a directory every user writes: anyone may
// make it first (or a link by that name) and then swap the socket, the
// groups' files or their state under its owner's runs. The directory must
// not be a symbolic link, must belong to this user or root, and be writable
// by its owner only. A missing one is fine: it is made by the caller.
func CheckRunDir(dir string) error {
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("run directory: %w", err)
	case st.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link (name the directory itself)", ErrUnsafeRunDir, dir)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeRunDir, dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s belongs to uid %d", ErrUnsafeRunDir, dir, sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by other users (mode %v)", ErrUnsafeRunDir, dir, st.Mode().Perm())
	}
	return nil
}

// ValidateGroup checks a group name: ^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$ (checked by hand: every
// command checks names, and a compiled expression would be work at start-up).
func ValidateGroup(name string) error {
	if !validGroupName(name) {
		return fmt.Errorf("invalid group name %q: use 1-64 lowercase letters, digits, '-', '_' or '.', starting and ending with a letter or digit", name)
	}
	return nil
}

func validGroupName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		inner := i > 0 && i < len(name)-1
		if !alnum && !(inner && (c == '-' || c == '_' || c == '.')) {
			return false
		}
	}
	return true
}

// GroupDir is the directory of group name under runDir.
func GroupDir(runDir, name string) string { return filepath.Join(runDir, "groups", name) }
