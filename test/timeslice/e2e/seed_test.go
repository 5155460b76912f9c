//go:build timeslicee2e

package timeslicee2e

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/ctxprobe"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
	"github.com/gpuslice/gpuslice/internal/timeslice"
)

// writeU32 writes v at off of a state file, as a member may.
func writeU32(t *testing.T, path string, off int, v uint32) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, v), int64(off)); err != nil {
		t.Fatal(err)
	}
}

// measuredGroup makes a group whose state file has one GPU slot where its
// members measured a context of kib (1 + KiB, as the library writes it).
func measuredGroup(t *testing.T, cfg timeslice.Config, name string, kib uint32) {
	t.Helper()
	setGroup(t, cfg, name, group.Change{File: "memory.max", Value: "1GiB"})
	state := groupstate.Path(cfg.RunDir, name)
	groupstatetest.WriteSlot(t, state, "GPU-0000", 0)
	writeU32(t, state, groupstate.OffContextKiB, kib)
}

// waitSeed waits until the state file of group name holds the context seed
// want (1 + KiB), for at most 5 s.
func waitSeed(t *testing.T, cfg timeslice.Config, name string, want uint32) {
	t.Helper()
	state := groupstate.Path(cfg.RunDir, name)
	var got uint32
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(state); err == nil && len(b) >= groupstate.HeaderSize {
			got = binary.LittleEndian.Uint32(b[groupstate.OffSeed:])
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: context seed %d (1 + KiB), want %d", name, got, want)
		}
	}
}

// TestContextSeed (issue 36): a new group's state file is given the largest
// context another group measured on the node, so its first contexts are
// reserved at that size, not the 512 MiB guess. A group's members write its
// measurement: one that says less (1 KiB) lowers no one's seed below what
// another group measured, one that says more (4 TiB) raises it no further
// than the guess. A daemon started again finds the seed in the groups' files.
func TestContextSeed(t *testing.T) {
	cfg := testCfg(t)
	measuredGroup(t, cfg, "measured", 300<<10+1) // 300 MiB
	measuredGroup(t, cfg, "low", 2)              // 1 KiB: a lie, or a small context
	stop := startDaemonCtx(t, t.Context(), cfg)
	setGroup(t, cfg, "fresh", group.Change{File: "memory.max", Value: "1GiB"})
	if err := groupstate.Create("/proc", groupstate.Path(cfg.RunDir, "fresh"), "fresh"); err != nil {
		t.Fatal(err)
	}
	waitSeed(t, cfg, "fresh", 300<<10+1)
	waitSeed(t, cfg, "low", 300<<10+1)
	measuredGroup(t, cfg, "high", ^uint32(0))
	waitSeed(t, cfg, "fresh", groupstate.SeedMaxKiB)
	stop()
	setGroup(t, cfg, "later", group.Change{File: "memory.max", Value: "1GiB"})
	if err := groupstate.Create("/proc", groupstate.Path(cfg.RunDir, "later"), "later"); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg)
	waitSeed(t, cfg, "later", groupstate.SeedMaxKiB)
}

// TestContextSeedProbed (issue 36): the daemon measures what a context takes
// on the node's device itself (bin/gpuslice-ctxprobe on the simulated GPU,
// whose contexts take 300 MiB) and gives every group that figure for its kind
// of device: a group made before the probe ran and one made after, with no
// context measured anywhere on the node.
func TestContextSeedProbed(t *testing.T) {
	cfg := testCfg(t)
	bin := os.Getenv("GPUSLICE_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(), "bin")
	}
	simDir := filepath.Join(bin, "sim")
	drv, err := gpu.OpenDriver(gpu.ModeSim, simDir)
	if err != nil {
		t.Fatalf("the simulated GPU (make bin/sim/libnvidia-ml.so.1): %v", err)
	}
	mem, err := drv.NVML.Memory(0)
	if serr := drv.NVML.Shutdown(); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	t.Setenv("GPUSLICE_SIM_CONTEXT_MEMORY", "314572800")
	cfg.ContextProbe = ctxprobe.Runner(filepath.Join(bin, ctxprobe.Binary), gpu.ModeSim, simDir)
	want := groupstate.DeviceSeed{TotalMiB: uint32(mem.Total >> 20), KiB: 300<<10 + 1}
	setGroup(t, cfg, "before", group.Change{File: "memory.max", Value: "1GiB"})
	if err := groupstate.Create("/proc", groupstate.Path(cfg.RunDir, "before"), "before"); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfg)
	waitDeviceSeed(t, cfg, "before", want)
	setGroup(t, cfg, "after", group.Change{File: "memory.max", Value: "1GiB"})
	if err := groupstate.Create("/proc", groupstate.Path(cfg.RunDir, "after"), "after"); err != nil {
		t.Fatal(err)
	}
	waitDeviceSeed(t, cfg, "after", want)
	// A member zeroes its group's figure (members map the file writable):
	// the daemon writes it again at a refresh, as it does the limit.
	overwriteDeviceSeed(t, groupstate.Path(cfg.RunDir, "after"), want.TotalMiB, 1)
	waitDeviceSeed(t, cfg, "after", want)
}

// overwriteDeviceSeed writes kib into the state file's device seed entry of
// kind mib, as a member can.
func overwriteDeviceSeed(t *testing.T, path string, mib, kib uint32) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, groupstate.HeaderSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	for i := range groupstate.DeviceSeeds {
		if binary.LittleEndian.Uint32(b[groupstate.OffDevSeedMiB+4*i:]) == mib {
			if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, kib), int64(groupstate.OffDevSeedKiB+4*i)); err != nil {
				t.Fatal(err)
			}
			if got, err := groupstate.ReadDeviceSeeds(path); err != nil || slices.ContainsFunc(got, func(d groupstate.DeviceSeed) bool { return d.TotalMiB == mib && d.KiB != kib }) {
				t.Fatalf("after the overwrite: %v, %v", got, err)
			}
			return
		}
	}
	t.Fatalf("%s: no device seed of %d MiB", path, mib)
}

// waitDeviceSeed waits until group name's state file holds the device seed
// want, for at most 30 s (a bound for a CPU-starved probe, not a speed check).
func waitDeviceSeed(t *testing.T, cfg timeslice.Config, name string, want groupstate.DeviceSeed) {
	t.Helper()
	var got []groupstate.DeviceSeed
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err = groupstate.ReadDeviceSeeds(groupstate.Path(cfg.RunDir, name))
		if err == nil && slices.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: device seeds %v, %v; want %v", name, got, err, want)
		}
	}
}
