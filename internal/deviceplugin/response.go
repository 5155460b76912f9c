package deviceplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Paths inside the container.
const (
	ContainerLibDir = "/usr/local/gpuslice/lib"
	ContainerSimDir = "/usr/local/gpuslice/sim"
	// ContainerSimHostProc: where the simulated driver finds the host's
	// /proc (GPUSLICE_SIM_HOST_PROC).
	ContainerSimHostProc = "/usr/local/gpuslice/host-proc"
	// ContainerPreload: the dynamic loader's preload list, mounted read-only
	// from Inject.Preload so that every dynamically linked program of the
	// container loads the library, whatever its environment says.
	ContainerPreload = "/etc/ld.so.preload"
	// ContainerGroupDir: the container's group directory, read-only, at one
	// path the library knows, with ContainerGroupFile writable in it.
	ContainerGroupDir = groupstate.ContainerDir
	// ContainerGroupFile: the container's group state file, at one path the
	// library knows (GS_CONTAINER_GROUP_FILE in libgpuslice's shm.h): where
	// it exists, it is the library's group whatever GPUSLICE_GROUP_FILE says.
	ContainerGroupFile = groupstate.ContainerFile
	// GateOffFile: in a group's directory, the node's word that its
	// containers' launches are not gated (MPS clients). The library reads it
	// at ContainerGroupDir (GS_CONTAINER_GATE_OFF), where the container cannot
	// write, instead of GPUSLICE_GATE.
	GateOffFile = group.FileGateOff
)

// Inject says what a container gets besides its GPU device nodes.
type Inject struct {
	// DevRoot is the host directory holding the nvidia<minor> nodes (/dev).
	DevRoot string
	// ControlDevices are host paths of driver-wide nodes every GPU
	// container needs (nvidiactl, nvidia-uvm), mounted at the same path.
	ControlDevices []string
	// Library is the host path of libgpuslice.so ("" = not injected).
	Library string
	// Preload is the host path of a file that names the library's container
	// path (PreloadList), mounted read-only at ContainerPreload; required
	// with Library.
	Preload string
	// RunDir is the time-slice daemon's run directory: the container's group
	// directory and the daemon socket are mounted at their host paths, so
	// the daemon recognises the group file a process names.
	RunDir string
	Socket string
	// SimDir is the simulated driver's library directory ("" on a real
	// driver); SimState its shared state file; SimHostProc the host's
	// /proc, mounted read-only so that the simulated driver, like the
	// kernel driver, knows processes by their host pid.
	SimDir, SimState, SimHostProc string
	// Env is added to every container (e.g. GPUSLICE_SIM_GPUS).
	Env map[string]string
	// MPS holds the GPUs in mps mode, by UUID (mps.go).
	MPS map[string]MPSGPU
	// DeviceGroups: the group directory is also mounted per GPU, at
	// groupstate.ContainerDeviceDir(UUID) (read-only, its state file
	// writable), so that in a container holding several groups (a container
	// naming several DRA claims, each a group of its own) each GPU is
	// charged and gated to the group of the claim that brought it.
	DeviceGroups bool
	// CDIKind names the CDI kind of the node's GPU devices
	// ("gpuslice.io/gpu": the spec gpuslice-node writes; "nvidia.com/gpu":
	// the NVIDIA toolkit's); "" answers without CDI device names.
	CDIKind string
}

var groupUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// GroupName is the node-daemon group of one container: readable, unique by
// pod UID and container, within the group name rules.
func GroupName(c Candidate) string {
	sum := sha256.Sum256([]byte(string(c.UID) + "/" + c.Container))
	name := strings.Trim(groupUnsafe.ReplaceAllString(strings.ToLower(c.Name+"-"+c.Container), "-"), "-")
	if len(name) > 40 {
		name = strings.Trim(name[:40], "-")
	}
	out := "k8s-" + name + "-" + hex.EncodeToString(sum[:6])
	if paths.ValidateGroup(out) != nil {
		return "k8s-" + hex.EncodeToString(sum[:12])
	}
	return out
}

// MemoryLimit is the per-GPU memory limit of a container: the smallest share
// of memory among its GPUs (0 = no limit when no share names memory).
func MemoryLimit(c Candidate) int64 {
	var lim int64
	for _, g := range c.GPUs {
		if g.MemoryBytes > 0 && (lim == 0 || g.MemoryBytes < lim) {
			lim = g.MemoryBytes
		}
	}
	return lim
}

// Response builds the Allocate answer for c: its container edits (Edits)
// and, where CDIKind is set, the CDI names of its GPUs.
func (in Inject) Response(c Candidate, gpus map[string]gpuset.GPU, group string) (*pluginapi.ContainerAllocateResponse, error) {
	e, uuids, err := in.edits(c, gpus, group)
	if err != nil {
		return nil, err
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: e.env}
	for _, d := range e.devices {
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: d.Path, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, m := range e.mounts {
		r.Mounts = append(r.Mounts, &pluginapi.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.Options[0] == "ro"})
	}
	if in.CDIKind != "" {
		for _, u := range uuids {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: in.CDIKind + "=" + u})
		}
	}
	return r, nil
}

// Edits are what a container holding c's GPUs (gpus maps UUID to the GPU) in
// group gets, as the container runtime applies them: its GPUs' nodes, the
// control devices, the library, its group directory, the daemon socket and
// the environment the library reads. Neutral: the device plugin answers
// them (Response), the DRA driver writes them into a claim's CDI spec.
func (in Inject) Edits(c Candidate, gpus map[string]gpuset.GPU, group string) (specs.ContainerEdits, error) {
	e, _, err := in.edits(c, gpus, group)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	return e.cdi(), nil
}

func (in Inject) edits(c Candidate, gpus map[string]gpuset.GPU, group string) (*edits, []string, error) {
	r := &edits{env: map[string]string{}}
	if err := CheckContainerEnv(c.Pod, c.Container); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", c, err)
	}
	minors, uuids, err := nodeGPUs(c, gpus)
	if err != nil {
		return nil, nil, err
	}
	nvidiaContract(r, uuids)
	in.addDevices(r, minors)
	if err := in.addNodeMounts(r, group); err != nil {
		return nil, nil, err
	}
	if in.DeviceGroups && in.RunDir != "" {
		dir := filepath.Join(in.RunDir, "groups", group)
		for _, u := range uuids {
			r.mount(dir, groupstate.ContainerDeviceDir(u), true)
			r.mount(filepath.Join(dir, groupstate.FileName), groupstate.ContainerDeviceFile(u), false)
		}
	}
	addElasticEnv(r, c)
	in.addSimulator(r)
	for k, v := range in.Env {
		r.env[k] = v
	}
	if err := in.addMPS(c, group, r); err != nil {
		return nil, nil, err
	}
	return r, uuids, nil
}

// edits collects a container's edits in the order they are made.
type edits struct {
	env     map[string]string
	devices []*specs.DeviceNode
	mounts  []*specs.Mount
}

// mount adds a bind mount, read-only or not.
func (e *edits) mount(host, ctr string, readOnly bool) {
	opts := []string{"rw", "nosuid", "nodev", "bind"}
	if readOnly {
		opts[0] = "ro"
	}
	e.mounts = append(e.mounts, &specs.Mount{HostPath: host, ContainerPath: ctr, Options: opts})
}

// cdi renders the edits in CDI's type, the environment sorted.
func (e *edits) cdi() specs.ContainerEdits {
	out := specs.ContainerEdits{DeviceNodes: e.devices, Mounts: e.mounts}
	keys := make([]string, 0, len(e.env))
	for k := range e.env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out.Env = append(out.Env, k+"="+e.env[k])
	}
	return out
}

// nodeGPUs looks c's GPUs up on this node and returns their minors and
// UUIDs, each sorted; a GPU not on the node or unhealthy is an error.
func nodeGPUs(c Candidate, gpus map[string]gpuset.GPU) ([]uint32, []string, error) {
	minors := make([]uint32, 0, len(c.GPUs))
	uuids := make([]string, 0, len(c.GPUs))
	for _, a := range c.GPUs {
		g, ok := gpus[a.UUID]
		if !ok {
			return nil, nil, fmt.Errorf("%s: assigned GPU %s is not on this node", c, a.UUID)
		}
		if !g.Healthy {
			return nil, nil, fmt.Errorf("%s: assigned GPU %s is unhealthy", c, a.UUID)
		}
		minors = append(minors, g.Minor)
		uuids = append(uuids, g.UUID)
	}
	slices.Sort(minors)
	slices.Sort(uuids)
	return minors, uuids, nil
}

// addDevices adds the GPUs' nodes (by minor) and the control devices.
func (in Inject) addDevices(r *edits, minors []uint32) {
	for _, m := range minors {
		p := "/dev/nvidia" + strconv.FormatUint(uint64(m), 10)
		r.devices = append(r.devices, &specs.DeviceNode{Path: p, HostPath: filepath.Join(in.DevRoot, filepath.Base(p)), Permissions: "rw"})
	}
	for _, d := range in.ControlDevices {
		r.devices = append(r.devices, &specs.DeviceNode{Path: d, HostPath: d, Permissions: "rw"})
	}
}

// ContainerLibrary is where a container finds the library at host path lib.
func ContainerLibrary(lib string) string {
	return ContainerLibDir + "/" + filepath.Base(lib)
}

// PreloadList is the content of the file mounted at ContainerPreload for
// the library at host path lib.
func PreloadList(lib string) string {
	return ContainerLibrary(lib) + "\n"
}

// addNodeMounts adds the library (preloaded by LD_PRELOAD and by the
// loader's own list), the container's group directory and state file, and
// the node daemon's socket, each where configured.
func (in Inject) addNodeMounts(r *edits, group string) error {
	if in.Library != "" {
		if in.Preload == "" {
			return fmt.Errorf("library %s is injected without a preload list", in.Library)
		}
		lib := ContainerLibrary(in.Library)
		// The loader's list holds programs whose environment drops
		// LD_PRELOAD; bind-mounted over the image's own list, if it has one.
		r.mount(in.Library, lib, true)
		r.mount(in.Preload, ContainerPreload, true)
		r.env["LD_PRELOAD"] = lib
	}
	if in.RunDir != "" {
		// The group's directory read-only: its settings and cgroup binding
		// are the node's (a container writing them would take more GPU time
		// or pull other containers into its group); only its state file, which
		// the library maps, is writable. The state file also at the one path
		// the library looks at first, so a member that drops
		// GPUSLICE_GROUP_FILE (or names another file) is still in the group.
		dir := filepath.Join(in.RunDir, "groups", group)
		state := filepath.Join(dir, groupstate.FileName)
		r.mount(dir, dir, true)
		r.mount(state, state, false)
		r.mount(dir, ContainerGroupDir, true)
		r.mount(state, ContainerGroupFile, false)
		r.env["GPUSLICE_GROUP"] = group
		r.env["GPUSLICE_GROUP_FILE"] = state
	}
	if in.Socket != "" {
		r.mount(in.Socket, in.Socket, false)
		r.env["GPUSLICE_NODE_SOCKET"] = in.Socket
	}
	return nil
}

// addElasticEnv says elastic memory where the pod asks for it, so a GPU
// slot the library claims is elastic from the start. The limit is not in the
// environment: it is the group's, written into its state file by the
// time-slice daemon before the container starts (internal/groupmgr).
func addElasticEnv(r *edits, c Candidate) {
	if MemoryLimit(c) <= 0 || c.Pod == nil {
		return
	}
	if e, err := api.ParseElastic(c.Pod); err == nil && e.Max > 0 {
		r.env["GPUSLICE_MEMORY_ELASTIC"] = map[bool]string{false: "on", true: "spill"}[e.Spill]
	}
}

// addSimulator mounts the simulated driver's libraries, state file and the
// host's /proc, each where configured ("" on a real driver).
func (in Inject) addSimulator(r *edits) {
	if in.SimDir != "" {
		r.mount(in.SimDir, ContainerSimDir, true)
		r.env["LD_LIBRARY_PATH"] = ContainerSimDir
		r.env["GPUSLICE_LIBCUDA"] = ContainerSimDir + "/libcuda.so.1"
		r.env["GPUSLICE_LIBNVML"] = ContainerSimDir + "/libnvidia-ml.so.1"
	}
	if in.SimState != "" {
		r.mount(in.SimState, in.SimState, false)
		r.env["GPUSLICE_SIM_STATE"] = in.SimState
	}
	if in.SimHostProc != "" {
		r.mount(in.SimHostProc, ContainerSimHostProc, true)
		r.env["GPUSLICE_SIM_HOST_PROC"] = ContainerSimHostProc
	}
}
