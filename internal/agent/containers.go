package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpuslice/gpuslice/internal/cri"
	"github.com/gpuslice/gpuslice/internal/hotplug"
)

// ErrNoContainer wraps a container whose process is not found (not started
// yet, or gone).
var ErrNoContainer = errors.New("container not found")

// containerRuntime finds a running container's process and OCI spec
// (cri.Client: ContainerStatus, verbose, over the runtime's CRI socket).
type containerRuntime interface {
	Container(ctx context.Context, id string) (cri.Container, error)
}

// runtimeID strips the runtime prefix of a container status ID
// ("containerd://abc" -> "abc").
func runtimeID(s string) string {
	if _, id, ok := strings.Cut(s, "://"); ok {
		return id
	}
	return s
}

// ownsCgroup reports whether a cgroup directory is container id's: every
// runtime and cgroup driver names the container's cgroup after its ID
// (<id>, cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope). A
// PID the runtime reported that now lives elsewhere has exited (and may have
// been reused).
func ownsCgroup(dir, id string) bool {
	return id != "" && strings.Contains(filepath.Base(dir), id)
}

// findContainer asks the runtime for container id and reads its device
// cgroup from the kernel (through the process), checked to be the
// container's; on cgroup v2 its device rules come from its OCI spec plus the
// runtime's defaults.
func findContainer(ctx context.Context, rt containerRuntime, m hotplug.Mounts, procRoot, id string) (hotplug.Container, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return hotplug.Container{}, fmt.Errorf("%w: bad container id %q", ErrNoContainer, id)
	}
	info, err := rt.Container(ctx, id)
	if errors.Is(err, cri.ErrNotFound) || errors.Is(err, cri.ErrNotRunning) {
		return hotplug.Container{}, fmt.Errorf("%w: %w", ErrNoContainer, err)
	}
	if err != nil {
		return hotplug.Container{}, err
	}
	cg, err := hotplug.CgroupOfPID(m, procRoot, info.PID)
	if err != nil {
		return hotplug.Container{}, fmt.Errorf("%w: container %s: %w", ErrNoContainer, id, err)
	}
	if !ownsCgroup(cg.Dir, id) {
		return hotplug.Container{}, fmt.Errorf("%w: pid %d of container %s is in %s, not the container's cgroup", ErrNoContainer, info.PID, id, cg)
	}
	c := hotplug.Container{PID: info.PID, Cgroup: cg}
	if cg.V2 {
		// The runtime's program allowed the spec's rules and its defaults.
		if c.Base, err = hotplug.SpecDeviceRules(info.Spec); err != nil {
			return c, fmt.Errorf("container %s: %w", id, err)
		}
		c.Base = append(c.Base, hotplug.RuntimeDefaultRules()...)
	}
	return c, nil
}
