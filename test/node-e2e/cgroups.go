//go:build nodee2e

package nodee2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The kubelet removes, killing their processes, pod cgroups under its
// cgroup root that belong to no pod it knows. Two node end-to-end runs on
// one machine (the cgroup hierarchies are shared, mount namespace or not)
// would kill each other's containers under the default root, so each run's
// kubelet (and agent) gets a cgroup root of its own, made here in every
// hierarchy and removed when the run stops.

// cpuWeight is the CPU weight (cgroup v1 cpu.shares; a process alone is
// 1024) of a run's cgroup root, which holds the test process and so every
// process of the run (control plane, kubelet, agent, time-slice daemon, pods): on
// a machine shared with other work, the node's processes get the CPU when
// they need it, as on a node of their own, instead of waiting behind every
// foreign runnable thread.
const cpuWeight = "102400"

// cgroupMounts lists the cgroup (v1) and cgroup2 mount points.
func cgroupMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		// ... mount point (5th field) ... " - " fstype source options
		pre, post, ok := strings.Cut(line, " - ")
		f, fs := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(fs) > 0 && (fs[0] == "cgroup" || fs[0] == "cgroup2") && !slices.Contains(out, f[4]) {
			out = append(out, f[4])
		}
	}
	return out, nil
}

// makeCgroupRoot creates root (a path like /gpuslice-e2e-x) in every
// hierarchy; a new cpuset gets its parent's CPUs and memory nodes.
func makeCgroupRoot(root string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := filepath.Join(m, root)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("cgroup root %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			parent, err := os.ReadFile(filepath.Join(m, f))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("cgroup root %s: %s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// joinCgroupRoot gives root its CPU weight in the v1 cpu hierarchy and moves
// this process there (its children follow); leaveCgroupRoot moves it back.
func joinCgroupRoot(root string) error {
	return moveSelf(root, true)
}

func leaveCgroupRoot() {
	_ = moveSelf("/", false) // best effort: the root is then left in place
}

func moveSelf(root string, weight bool) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, "cpu.shares")); err != nil {
			continue // not the v1 cpu hierarchy
		}
		dir := filepath.Join(m, root)
		if weight {
			if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(cpuWeight), 0o644); err != nil {
				return fmt.Errorf("cgroup %s: cpu.shares: %w", dir, err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: move the test process: %w", dir, err)
		}
	}
	return nil
}

// removeCgroupRoot removes root and every cgroup below it, deepest first,
// once their processes are gone (best effort: a cgroup still in use stays).
func removeCgroupRoot(root string) {
	mounts, err := cgroupMounts()
	if err != nil {
		return
	}
	for _, m := range mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, root), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i]) // best effort, see above
		}
	}
}
