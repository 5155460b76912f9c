package hotplug

import (
	"fmt"

	"github.com/gpuslice/gpuslice/internal/devices"
)

// Container is a running container as hotplug sees it.
type Container struct {
	// PID is any process of the container (its init); its mount namespace
	// is where device nodes are created.
	PID    int
	Cgroup Cgroup
	// Base are the container's own device rules (its OCI config); needed
	// on cgroup v2 only, where the device program is rebuilt whole.
	Base []devices.Rule
}

// Apply gives c exactly the wanted managed nodes (keyed by Node.Path) with
// perms (e.g. rw) and nothing else of managed: the device cgroup first
// (denials before allows), then the nodes in its mount namespace. So a
// removed device is unusable before its node goes, and an added one is
// usable as soon as its node appears.
func Apply(procRoot string, c Container, managed []Node, want map[string]bool, perms devices.Perms) (changed bool, err error) {
	devs := make([]devices.Device, 0, len(managed))
	devWant := map[devices.Device]devices.Perms{}
	for _, n := range managed {
		devs = append(devs, n.Device)
		if want[n.Path] {
			devWant[n.Device] = perms
		}
	}
	if c.Cgroup.V2 {
		changed, err = SyncV2(c.Cgroup.Dir, c.Base, devWant)
	} else {
		changed, err = SyncV1(c.Cgroup.Dir, devs, devWant)
	}
	if err != nil {
		return changed, fmt.Errorf("device cgroup %s: %w", c.Cgroup, err)
	}
	nc, err := SyncNodes(procRoot, c.PID, managed, want)
	return changed || nc, err
}
