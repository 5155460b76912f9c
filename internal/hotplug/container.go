package hotplug

import (
	"fmt"

	devconfig "github.com/opencontainers/cgroups/devices/config"
)

// Container is a running container as hotplug sees it.
type Container struct {
	// PID is any process of the container (its init); its mount namespace
	// is where device nodes are created.
	PID    int
	Cgroup Cgroup
	// Base are the container's own device rules (its OCI config); needed
	// on cgroup v2 only, where the device program is rebuilt whole.
	Base []*devconfig.Rule
}

// Apply gives c exactly the wanted managed devices (by Path) with their
// Permissions (e.g. rw) and nothing else of managed: the device cgroup first
// (denials before allows), then the nodes in its mount namespace. So a
// removed device is unusable before its node goes, and an added one is
// usable as soon as its node appears. progs serves cgroup v2.
func Apply(procRoot string, progs *Programs, c Container, managed []devconfig.Device, want map[string]bool) (changed bool, err error) {
	if c.Cgroup.V2 {
		changed, err = SyncV2(progs, c.Cgroup.Dir, c.Base, managed, want)
	} else {
		changed, err = SyncV1(c.Cgroup.Dir, managed, want)
	}
	if err != nil {
		return changed, fmt.Errorf("device cgroup %s: %w", c.Cgroup, err)
	}
	nc, err := SyncNodes(procRoot, c.PID, managed, want)
	return changed || nc, err
}
