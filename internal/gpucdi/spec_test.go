package gpucdi

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/testbin"
)

// simGPUs lists the simulated GPU's devices (bin/sim, built by make).
func simGPUs(t *testing.T) []GPU {
	t.Helper()
	bin := testbin.Dir(t)
	t.Setenv("GPUSLICE_SIM_GPUS", "3")
	t.Setenv("GPUSLICE_SIM_STATE", filepath.Join(t.TempDir(), "sim.state"))
	drv, err := gpu.OpenDriver(gpu.ModeSim, filepath.Join(bin, "sim"))
	if err != nil {
		t.Fatalf("simulated GPU (run make first): %v", err)
	}
	devs, err := gpu.Devices(drv.NVML)
	if serr := drv.NVML.Shutdown(); err == nil {
		err = serr
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make([]GPU, 0, len(devs))
	for _, d := range devs {
		out = append(out, GPU{UUID: d.UUID, Minor: uint32(d.Minor)})
	}
	return out
}

// TestSpecResolvesOnTheSimulatedGPU writes the spec of the simulated GPUs,
// reads it back through the CDI library as a runtime does, and injects one
// GPU into an OCI spec: exactly its node and the control nodes, with device
// cgroup rules for them.
func TestSpecResolvesOnTheSimulatedGPU(t *testing.T) {
	gpus := simGPUs(t)
	dir, devRoot := t.TempDir(), t.TempDir()
	spec, err := Spec(gpus, devRoot, []string{"/dev/null"}) // a character device every machine has
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := c.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI errors: %v", errs)
	}
	var want []string
	for _, g := range gpus {
		want = append(want, Kind+"="+g.UUID)
	}
	slices.Sort(want)
	if got := c.ListDevices(); !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	pick := gpus[1]
	o := &oci.Spec{Linux: &oci.Linux{}}
	if unresolved, err := c.InjectDevices(o, Kind+"="+pick.UUID); err != nil {
		t.Fatalf("inject: %v (unresolved %v)", err, unresolved)
	}
	var paths []string
	for _, d := range o.Linux.Devices {
		paths = append(paths, d.Path)
		if d.Path == "/dev/nvidia"+itoa(pick.Minor) && (d.Major != major || d.Minor != int64(pick.Minor) || d.Type != "c") {
			t.Errorf("GPU node %+v", d)
		}
	}
	if !slices.Equal(paths, []string{"/dev/null", "/dev/nvidia" + itoa(pick.Minor)}) && !slices.Equal(paths, []string{"/dev/nvidia" + itoa(pick.Minor), "/dev/null"}) {
		t.Fatalf("injected nodes %v: want the picked GPU's and the control node only", paths)
	}
	allowed := 0
	for _, r := range o.Linux.Resources.Devices {
		if r.Allow && r.Major != nil && *r.Major == major && r.Minor != nil && *r.Minor == int64(pick.Minor) {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("device cgroup rules %+v: want one allowing c %d:%d", o.Linux.Resources.Devices, major, pick.Minor)
	}
	if _, err := c.InjectDevices(&oci.Spec{Linux: &oci.Linux{}}, Kind+"=GPU-not-here"); err == nil {
		t.Fatal("an unknown GPU resolved")
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("left after Remove: %v", m)
	}
}

func TestSpecRejects(t *testing.T) {
	if _, err := Spec([]GPU{{UUID: "GPU-a b", Minor: 0}}, "/dev", nil); err == nil {
		t.Error("a device name with a space was accepted")
	}
	if _, err := Spec(nil, "/dev", []string{t.TempDir()}); err == nil {
		t.Error("a directory was accepted as a control device")
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
