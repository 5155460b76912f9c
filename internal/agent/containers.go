package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

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

// knownContainers remembers the runtime's answer for each running container
// (its init pid and spec do not change while it runs), so the resync asks
// the runtime only about containers it has not seen. An answer is used only
// while the kernel still has its pid in the container's cgroup; at most max
// are kept, and those of containers no longer on the node are dropped.
type knownContainers struct {
	rt  containerRuntime
	max int
	mu  sync.Mutex
	m   map[string]cri.Container
}

func newKnownContainers(rt containerRuntime, max int) *knownContainers {
	return &knownContainers{rt: rt, max: max, m: map[string]cri.Container{}}
}

// get returns the remembered answer for id, or asks the runtime.
func (k *knownContainers) get(ctx context.Context, id string) (c cri.Container, remembered bool, err error) {
	k.mu.Lock()
	c, ok := k.m[id]
	k.mu.Unlock()
	if ok {
		return c, true, nil
	}
	c, err = k.rt.Container(ctx, id)
	return c, false, err
}

func (k *knownContainers) put(id string, c cri.Container) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.m[id]; !ok && len(k.m) >= k.max {
		clear(k.m)
	}
	k.m[id] = c
}

// keep drops every answer but those of live container IDs.
func (k *knownContainers) keep(live map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id := range k.m {
		if !live[id] {
			delete(k.m, id)
		}
	}
}

func (k *knownContainers) forget(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, id)
}

// findContainer asks the runtime for container id (or remembers its answer):
// its device cgroup is the one its OCI spec names (linux.cgroupsPath), which
// the kernel must list the container's pid in; on cgroup v2 its device rules come from its OCI spec
// plus the runtime's defaults. A remembered answer that fails the check is
// dropped and the runtime asked again.
func findContainer(ctx context.Context, k *knownContainers, m hotplug.Mounts, id string) (hotplug.Container, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") {
		return hotplug.Container{}, fmt.Errorf("%w: bad container id %q", ErrNoContainer, id)
	}
	for {
		info, remembered, err := k.get(ctx, id)
		if errors.Is(err, cri.ErrNotFound) || errors.Is(err, cri.ErrNotRunning) {
			return hotplug.Container{}, fmt.Errorf("%w: %w", ErrNoContainer, err)
		}
		if err != nil {
			return hotplug.Container{}, err
		}
		c, err := checkContainer(m, id, info)
		if err == nil {
			k.put(id, info)
			return c, nil
		}
		k.forget(id)
		if !remembered {
			return c, err
		}
	}
}

func checkContainer(m hotplug.Mounts, id string, info cri.Container) (hotplug.Container, error) {
	if info.Spec == nil || info.Spec.Linux == nil {
		return hotplug.Container{}, fmt.Errorf("container %s: OCI spec without linux", id)
	}
	cg, err := hotplug.ContainerCgroup(m, info.Spec.Linux.CgroupsPath, info.PID)
	if errors.Is(err, hotplug.ErrNotMember) {
		return hotplug.Container{}, fmt.Errorf("%w: container %s: %w", ErrNoContainer, id, err)
	}
	if err != nil {
		return hotplug.Container{}, fmt.Errorf("container %s: %w", id, err)
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
