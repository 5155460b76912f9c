// Package paths names the files gpuslice processes share on a node.
package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

// GroupStateFile is the library's shared-memory state file of a group.
func GroupStateFile(runDir, name string) string {
	return filepath.Join(GroupDir(runDir, name), "gpu.state")
}
