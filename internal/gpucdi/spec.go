// Package gpucdi writes the Container Device Interface (CDI) spec of a
// node's GPUs: one device per GPU, named by its UUID (kind gpuslice.io/gpu),
// with its /dev/nvidia<minor> node, and the driver-wide nodes (nvidiactl,
// nvidia-uvm) as spec-wide edits. A CDI-enabled runtime (containerd >= 1.7,
// CRI-O) resolves the device names the device plugin answers with against
// it. On nodes with the NVIDIA container toolkit, its own spec (kind
// nvidia.com/gpu, from `nvidia-ctk cdi generate`) also carries the driver
// libraries; gpuslice-node can name its devices instead of writing this one.
package gpucdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Kind is the CDI kind of the spec this package writes.
const Kind = "gpuslice.io/gpu"

// KindNVIDIA is the NVIDIA container toolkit's kind.
const KindNVIDIA = "nvidia.com/gpu"

// SpecName is the spec's file name (without extension) in the spec directory.
const SpecName = "gpuslice.io-gpu"

// GPU is one GPU of the node.
type GPU struct {
	UUID  string
	Minor uint32
}

// Spec returns the CDI spec of gpus: devRoot holds the host's nvidia<minor>
// nodes (mounted at /dev/nvidia<minor>); control are host paths of
// driver-wide nodes, mounted at the same path.
func Spec(gpus []GPU, devRoot string, control []string) (*specs.Spec, error) {
	s := &specs.Spec{Kind: Kind}
	for _, g := range gpus {
		if err := parser.ValidateDeviceName(g.UUID); err != nil {
			return nil, fmt.Errorf("GPU %s: %w", g.UUID, err)
		}
		node := "nvidia" + strconv.FormatUint(uint64(g.Minor), 10)
		s.Devices = append(s.Devices, specs.Device{Name: g.UUID, ContainerEdits: specs.ContainerEdits{
			DeviceNodes: []*specs.DeviceNode{{Path: "/dev/" + node, HostPath: filepath.Join(devRoot, node), Type: "c",
				Major: major, Minor: int64(g.Minor), Permissions: "rw"}},
		}})
	}
	for _, c := range control {
		n, err := deviceNode(c)
		if err != nil {
			return nil, err
		}
		s.ContainerEdits.DeviceNodes = append(s.ContainerEdits.DeviceNodes, n)
	}
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version: %w", err)
	}
	s.Version = v
	return s, nil
}

// major is the character device major of /dev/nvidia<minor>.
const major = 195

// deviceNode describes a host device node for the spec.
func deviceNode(path string) (*specs.DeviceNode, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("control device %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return nil, fmt.Errorf("control device %s: not a character device", path)
	}
	return &specs.DeviceNode{Path: path, HostPath: path, Type: "c", Major: int64(unix.Major(st.Rdev)),
		Minor: int64(unix.Minor(st.Rdev)), Permissions: "rw"}, nil
}

// Write validates spec with the CDI library and writes it into dir (created
// if missing), replacing an older one atomically.
func Write(dir string, spec *specs.Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CDI spec dir: %w", err)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil && c == nil {
		return fmt.Errorf("CDI cache: %w", err)
	}
	// Other specs in dir with errors are not ours to judge.
	if err := c.WriteSpec(spec, SpecName); err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	return nil
}

// Remove removes the spec written by Write (none: not an error).
func Remove(dir string) error {
	var errs []error
	for _, ext := range []string{".json", ".yaml"} {
		if err := os.Remove(filepath.Join(dir, SpecName+ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
