//go:build gpusuite

package gpu

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The suite's binary doubles as the small NVML programs the MIG check runs in
// the environment of the programs it checks (GS_GPU_CHILD).
func TestMain(m *testing.M) {
	if mode := os.Getenv("GS_GPU_CHILD"); mode != "" {
		if err := migChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "gs-gpu child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// migChild through the driver's NVML (go-nvml): "mig-list" prints GPU 0's
// MIG mode ("mode unsupported" or "mode <current> <pending>") and a
// "mig <uuid> <name>" line per MIG device; "mig-make" makes two 3g.40gb GPU
// instances with a full compute instance each (root).
func migChild(mode string) error {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlInit: %w", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU 0: %w", ret)
	}
	switch mode {
	case "mig-make":
		return migMake(d)
	case "mig-procs":
		return migProcs(lib)
	}
	cur, pend, ret := d.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		fmt.Println("mode unsupported")
		return nil
	case ret != nvml.SUCCESS:
		return fmt.Errorf("MIG mode: %w", ret)
	}
	fmt.Println("mode", cur, pend)
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("MIG device count: %w", ret)
	}
	for i := range n {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("MIG device %d: %w", i, ret)
		}
		uuid, ret1 := m.GetUUID()
		name, ret2 := m.GetName()
		if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS {
			return fmt.Errorf("MIG device %d: UUID %w, name %w", i, ret1, ret2)
		}
		fmt.Println("mig", uuid, name)
	}
	return nil
}

// migProcs lists the compute processes of the MIG device CUDA_VISIBLE_DEVICES
// names, as `gpuslice smi` lists a GPU's ("0 <pid> <MiB> MiB").
func migProcs(lib nvml.Interface) error {
	m, ret := lib.DeviceGetHandleByUUID(os.Getenv("CUDA_VISIBLE_DEVICES"))
	if ret != nvml.SUCCESS {
		return fmt.Errorf("MIG device %s: %w", os.Getenv("CUDA_VISIBLE_DEVICES"), ret)
	}
	ps, ret := m.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("MIG device processes: %w", ret)
	}
	for _, p := range ps {
		fmt.Printf("0 %d %d MiB\n", p.Pid, p.UsedGpuMemory>>20)
	}
	return nil
}

func migMake(d nvml.Device) error {
	info, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("3g profile: %w", ret)
	}
	for range 2 {
		gi, ret := d.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("create GPU instance: %w", ret)
		}
		ci, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("3c profile: %w", ret)
		}
		if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
			return fmt.Errorf("create compute instance: %w", ret)
		}
	}
	return nil
}

// migRun runs a child mode with s's environment and returns its stdout.
func (s *suite) migRun(t *testing.T, mode string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	c.Env = s.env("GS_GPU_CHILD=" + mode)
	return output(t, c)
}

// migSuite is the suite inside GPU 0's first MIG device (its own run
// directory, so its own time-slice daemon): nil and why where there is none.
// A real GPU's MIG mode and instances are the admin's; on the simulated GPU
// the check configures an H100 80GB in MIG mode and makes two 3g.40gb
// instances through NVML, as an admin would (root, as on a driver).
func (s *suite) migSuite(t *testing.T) (*suite, string) {
	m := *s
	m.rows = nil
	m.runDir = runDir(t)
	if s.sim {
		if os.Geteuid() != 0 {
			return nil, "MIG: on the simulated GPU the check makes its instances through NVML, which needs root (as on a driver)"
		}
		conf := filepath.Join(t.TempDir(), "h100.conf")
		if err := os.WriteFile(conf, []byte("name=\"NVIDIA H100 80GB HBM3\" memory=80GiB sms=132 mig=on\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		m.extraEnv = []string{"GPUSLICE_SIM_CONFIG=" + conf, "GPUSLICE_SIM_STATE=" + filepath.Join(m.runDir, "mig.state")}
		m.migRun(t, "mig-make")
	}
	sc := bufio.NewScanner(strings.NewReader(m.migRun(t, "mig-list")))
	var mode, uuid, name string
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mode "); ok {
			mode = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "mig "); ok && uuid == "" {
			uuid, name, _ = strings.Cut(v, " ")
		}
	}
	switch {
	case mode == "unsupported":
		return nil, fmt.Sprintf("MIG: GPU 0 (%s) is not MIG-capable", s.device)
	case !strings.HasPrefix(mode, "1 "):
		return nil, fmt.Sprintf("MIG: MIG mode is off on GPU 0 (%s; current and pending %q): run `sudo nvidia-smi -i 0 -mig 1` "+
			"and make an instance (`sudo nvidia-smi mig -i 0 -cgi 3g.40gb -C`) to run this check", s.device, mode)
	case uuid == "":
		return nil, fmt.Sprintf("MIG: GPU 0 (%s) is in MIG mode without a MIG device: make one (`sudo nvidia-smi mig -i 0 -cgi 3g.40gb -C`)", s.device)
	}
	m.extraEnv = append(m.extraEnv, "CUDA_VISIBLE_DEVICES="+uuid)
	// `gpuslice smi` lists GPUs; the instance's own list through NVML, inside the group as smi would be.
	m.procList = "GS_GPU_CHILD=mig-procs " + os.Args[0] + " -test.run='^$'"
	m.note = "MIG " + uuid
	if i := strings.LastIndex(name, "MIG "); i >= 0 {
		m.note = name[i:] // "MIG 3g.40gb"
	}
	t.Logf("MIG: the checks run in %s (%s)", uuid, name)
	return &m, ""
}

// testMIG runs, inside one MIG instance (CUDA_VISIBLE_DEVICES=MIG-<uuid>),
// the memory checks (the quota is the card every allocation path sees, and it
// gets no more; NVML lists only the group's process, not an outsider on the
// same instance) and 25/75 granted shares of two groups taking turns on it.
// Where GPU 0 has no MIG device it skips saying why.
func (s *suite) testMIG(t *testing.T) {
	m, why := s.migSuite(t)
	if m == nil {
		t.Skip(why)
	}
	defer func() { s.rows = append(s.rows, m.rows...) }()
	t.Run("LimitEveryPath", m.testLimitEveryPath)
	t.Run("NVMLProcessList", m.testProcessList)
	t.Run("Shares[25 75]", func(t *testing.T) { m.testShares(t, []int{25, 75}) })
}
