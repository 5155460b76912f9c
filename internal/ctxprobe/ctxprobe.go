// Package ctxprobe runs the node's context probe, bin/gpuslice-ctxprobe
// (libgpuslice/probe/ctxprobe.c: a process of the node's own, never preloaded,
// never a tenant's, that makes a primary context on each device and reads what
// NVML says it took), and reads what it printed. The time-slice daemon writes
// the result into every group's state file (groupstate.SetDeviceSeeds): a
// group's first contexts are reserved at what the driver takes for a context on
// that kind of device before the driver is asked (docs/contracts.md).
package ctxprobe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// Binary is the probe's file name beside the node's other binaries.
const Binary = "gpuslice-ctxprobe"

// Timeout bounds one run of the probe (cuInit and a context per device).
const Timeout = 60 * time.Second

// WaitDelay bounds how long Run waits, once the probe is killed (Timeout, or
// the caller's ctx ended), for its output to close: a grandchild holding
// it open does not hold Run.
const WaitDelay = 2 * time.Second

// maxLines bounds what is read from the probe.
const maxLines = 1024

// A context's figure is plausible from MinContext to MaxContext (and at most
// half the device's memory); one outside is taken for a failed measurement
// (another process's memory moved meanwhile, a driver that answered 0): that
// device is skipped (Skip.Retry) and its kind reserved as without the probe,
// never at that figure. A figure of 0 would reserve nothing for a context (a
// group's first contexts would all pass on the same headroom), a huge one
// would refuse every context on that kind of card.
const (
	MinContext = 1 << 20
	MaxContext = 4 << 30
)

// Plausible says whether a context of size bytes on a device of totalMiB is
// a figure to reserve by.
func Plausible(totalMiB, size uint64) bool {
	return size >= MinContext && size <= min(uint64(MaxContext), totalMiB<<20/2)
}

// Skip is a device the probe did not measure, and why; Retry: its figure was
// implausible (the daemon runs the probe again later).
type Skip struct {
	Device, Reason string
	Retry          bool
}

// Result is what one run of the probe measured: one seed per kind of device
// (the largest context of the devices of that memory size) and the devices
// it skipped.
type Result struct {
	Seeds   []groupstate.DeviceSeed
	Devices map[string]uint32 // UUID -> 1 + the context's KiB, each measured device
	Skipped []Skip
}

// Parse reads the probe's output: lines "seed <uuid> <MiB> <bytes>" and
// "skip <device> <reason...>". Anything else is an error (nothing is taken
// from output that does not parse whole); a seed whose figure is not
// Plausible is a skip.
func Parse(out []byte) (Result, error) {
	r := Result{Devices: map[string]uint32{}}
	kinds := map[uint32]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 512), 4096)
	for n := 1; sc.Scan(); n++ {
		if n > maxLines {
			return Result{}, fmt.Errorf("context probe: more than %d lines", maxLines)
		}
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == "skip":
			r.Skipped = append(r.Skipped, Skip{Device: f[1], Reason: strings.Join(f[2:], " ")})
		case len(f) == 4 && f[0] == "seed":
			mib, err1 := strconv.ParseUint(f[2], 10, 32)
			size, err2 := strconv.ParseUint(f[3], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return Result{}, fmt.Errorf("context probe: line %d %q: not a device's figure: %w", n, sc.Text(), err)
			}
			if mib == 0 || len(f[1]) >= groupstate.UUIDLen {
				return Result{}, fmt.Errorf("context probe: line %d %q: not a device's figure", n, sc.Text())
			}
			if !Plausible(mib, size) {
				r.Skipped = append(r.Skipped, Skip{Device: f[1], Retry: true,
					Reason: fmt.Sprintf("implausible figure: a context of %d bytes on a device of %d MiB", size, mib)})
				continue
			}
			kib := uint32((size+1023)>>10) + 1
			r.Devices[f[1]] = kib
			if i, ok := kinds[uint32(mib)]; ok {
				r.Seeds[i].KiB = max(r.Seeds[i].KiB, kib)
				continue
			}
			kinds[uint32(mib)] = len(r.Seeds)
			r.Seeds = append(r.Seeds, groupstate.DeviceSeed{TotalMiB: uint32(mib), KiB: kib})
		default:
			return Result{}, fmt.Errorf("context probe: line %d %q does not parse", n, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return Result{}, fmt.Errorf("context probe: %w", err)
	}
	return r, nil
}

// Want says what a run measures: Devices (UUIDs as NVML prints them; nil:
// every device) and not the devices whose memory size (MiB, as
// cuDeviceTotalMem reports it) is in Seeded: their kind is measured.
type Want struct {
	Devices []string
	Seeded  []uint32
}

// Args are the probe's options for w.
func (w Want) Args() []string {
	var args []string
	for _, d := range w.Devices {
		args = append(args, "-d", d)
	}
	for _, m := range w.Seeded {
		args = append(args, "-s", strconv.FormatUint(uint64(m), 10))
	}
	return args
}

// Runner returns a function that runs the probe at path against the node's
// driver (mode; the simulated GPU's libraries in simDir where gpu.OpenDriver
// finds no real one), each time it is called. A run for some Devices
// measures only those that are whole GPUs of the driver's list (a MIG
// instance is never probed): none, and the probe does not run.
func Runner(path string, mode gpu.Mode, simDir string) func(context.Context, Want) (Result, error) {
	return func(ctx context.Context, w Want) (Result, error) {
		drv, err := gpu.OpenDriver(mode, simDir)
		if err != nil {
			return Result{}, fmt.Errorf("context probe: %w", err)
		}
		var args []string
		if drv.Simulated {
			args = []string{filepath.Join(drv.LibDir, "libcuda.so.1"), filepath.Join(drv.LibDir, "libnvidia-ml.so.1")}
		}
		if w.Devices != nil {
			var devs []gpu.Device
			if devs, err = gpu.Devices(drv.NVML); err == nil {
				w.Devices = WholeGPUs(w.Devices, devs)
			}
		}
		if serr := drv.NVML.Shutdown(); err != nil || serr != nil {
			return Result{}, fmt.Errorf("context probe: list or close NVML: %w", errors.Join(err, serr))
		}
		if w.Devices != nil && len(w.Devices) == 0 {
			return Result{Devices: map[string]uint32{}}, nil
		}
		return Run(ctx, path, append(w.Args(), args...)...)
	}
}

// WholeGPUs are those of uuids that are GPUs of devs (the driver's whole
// GPUs), as NVML spells them.
func WholeGPUs(uuids []string, devs []gpu.Device) []string {
	out := []string{}
	for _, d := range devs {
		for _, u := range uuids {
			if strings.EqualFold(u, d.UUID) {
				out = append(out, d.UUID)
				break
			}
		}
	}
	return out
}

// Run runs the probe at path with args (Want.Args, then the driver's
// libraries; none: the system's) and parses its output. Its environment is the caller's less
// LD_PRELOAD: the probe measures the driver, not gpuslice's library. Killed
// at Timeout or when ctx ends, it returns at most WaitDelay later, unless the
// probe itself never dies (a process in an uninterruptible driver call):
// then Run does not return, and its caller must not wait for it.
func Run(ctx context.Context, path string, args ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = WaitDelay
	cmd.Env = withoutPreload(cmd.Environ())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Result{}, fmt.Errorf("context probe %s: %w: %s", path, err, strings.TrimSpace(tail(stderr.String())))
	}
	return Parse(out)
}

// withoutPreload drops LD_PRELOAD and CUDA_MPS_* (a probe that ran as an MPS
// client would measure the MPS server's client, and under a pinned memory
// limit read that limit as the device's memory).
func withoutPreload(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, "LD_PRELOAD=") && !strings.HasPrefix(e, "CUDA_MPS_") {
			out = append(out, e)
		}
	}
	return out
}

func tail(s string) string {
	if len(s) > 512 {
		return s[len(s)-512:]
	}
	return s
}
