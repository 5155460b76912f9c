// Package paths names the files gpuslice processes share on a node.
package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

var groupName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$`)

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

// ValidateGroup checks a group name.
func ValidateGroup(name string) error {
	if !groupName.MatchString(name) {
		return fmt.Errorf("invalid group name %q: use 1-64 lowercase letters, digits, '-', '_' or '.', starting and ending with a letter or digit", name)
	}
	return nil
}

// GroupDir is the directory of group name under runDir.
func GroupDir(runDir, name string) string { return filepath.Join(runDir, "groups", name) }

// GroupStateFile is the library's shared-memory state file of a group.
func GroupStateFile(runDir, name string) string {
	return filepath.Join(GroupDir(runDir, name), "gpu.state")
}
