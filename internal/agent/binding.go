package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/hotplug"
)

// cgroupBinding is container c's cgroup path as /proc/<pid>/cgroup shows it to
// this process (the hierarchy of its device cgroup: v1 devices or v2): the
// time-slice daemon is this process's child, in its cgroup namespace, and
// matches each caller's paths against a group's binding (group.FileCgroup).
// The path must name c's own cgroup (its components after any leading ".."
// end c.Cgroup.Dir, which the OCI spec named), never one of its ancestors (a
// pod's or this agent's cgroup would pull other processes in), and c's pid
// must still be in it after the read (not a reused pid): pids lists a cgroup
// directory's processes (nil: cgroups.GetPids, its cgroup.procs).
func cgroupBinding(procRoot string, c hotplug.Container, pids func(string) ([]int, error)) (string, error) {
	key := "devices"
	if c.Cgroup.V2 {
		key = ""
	}
	read := func(pid string) (string, error) {
		entries, err := cgroups.ParseCgroupFile(filepath.Join(procRoot, pid, "cgroup"))
		if err != nil {
			return "", err
		}
		p, ok := entries[key]
		if !ok {
			return "", fmt.Errorf("no %q hierarchy in /proc/%s/cgroup", key, pid)
		}
		return p, nil
	}
	p, err := read(strconv.Itoa(c.PID))
	if err != nil {
		return "", fmt.Errorf("cgroup binding of pid %d: %w", c.PID, err)
	}
	if err := namesDir(p, c.Cgroup.Dir); err != nil {
		return "", fmt.Errorf("cgroup binding of pid %d: %w", c.PID, err)
	}
	if self, err := read("self"); err == nil && (self == p || strings.HasPrefix(self, p+"/")) {
		return "", fmt.Errorf("cgroup binding of pid %d: %s holds this agent too", c.PID, p)
	}
	if pids == nil {
		pids = cgroups.GetPids
	}
	procs, err := pids(c.Cgroup.Dir)
	if err != nil {
		return "", fmt.Errorf("cgroup binding of pid %d: %w", c.PID, err)
	}
	if !slices.Contains(procs, c.PID) {
		return "", fmt.Errorf("%w: %w: pid %d left %s", ErrNoContainer, hotplug.ErrNotMember, c.PID, c.Cgroup)
	}
	return p, nil
}

// namesDir checks that cgroup path p (relative to a cgroup namespace: it may
// start with "/..") is the cgroup at directory dir: absolute, and its
// components after the leading ".." are at least one, none empty, "." or
// "..", and end dir's.
func namesDir(p, dir string) error {
	if !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\n\x00") {
		return fmt.Errorf("cgroup path %q is not absolute", p)
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for len(parts) > 0 && parts[0] == ".." {
		parts = parts[1:]
	}
	rest := strings.Join(parts, "/")
	if rest == "" || slices.ContainsFunc(parts, func(s string) bool { return s == "" || s == "." || s == ".." }) {
		return fmt.Errorf("cgroup path %q is not a container's own", p)
	}
	if d := filepath.Clean(dir); d != rest && !strings.HasSuffix(d, "/"+rest) {
		return fmt.Errorf("cgroup path %q is not the container's cgroup %s", p, dir)
	}
	return nil
}

// bindGroup writes group name's cgroup binding when it differs (through the
// group package: a new file renamed into place, mode 0644, owned by this
// agent, root). A group that does not exist is not this node's container's
// (or was removed meanwhile): nothing is written.
func bindGroup(ctx context.Context, tree group.Tree, name, cgroup string) error {
	if !tree.Exists(name) || tree.Cgroup(name) == cgroup {
		return nil
	}
	err := tree.WriteFile(name, group.FileCgroup, cgroup+"\n")
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup binding: %w", err)
	}
	klog.FromContext(ctx).Info("bound group to its container's cgroup", "group", name, "cgroup", cgroup)
	return nil
}
