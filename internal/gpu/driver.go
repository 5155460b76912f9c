package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Mode selects the driver: "auto" (real if present, else simulated), "real" or "sim".
type Mode string

// The driver modes.
const (
	ModeAuto Mode = "auto"
	ModeReal Mode = "real"
	ModeSim  Mode = "sim"
)

// ParseMode validates a mode string ("" means auto).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeReal, ModeSim:
		return Mode(s), nil
	}
	return "", fmt.Errorf("unknown driver mode %q (want auto, real or sim)", s)
}

// Driver is the GPU driver gpuslice found and opened.
type Driver struct {
	NVML NVML
	// Events watches XID errors through the same library.
	Events    XIDWatcher
	Simulated bool
	// LibDir is the directory holding the simulated libcuda.so.1 and
	// libnvidia-ml.so.1 (empty for the real driver).
	LibDir  string
	Version string
}

// simMarker is how the simulator names its driver version, so a simulator that is
// already on the loader path is never mistaken for a real driver.
const simMarker = "gpuslice-sim"

// OpenDriver finds the driver: the real one through the normal loader search, or the
// simulated one in simDir. The caller must Shutdown the returned NVML.
func OpenDriver(mode Mode, simDir string) (*Driver, error) {
	if mode != ModeSim {
		n := OpenNVML("")
		if err := n.Init(); err == nil {
			v, verr := n.DriverVersion()
			if verr == nil && !strings.Contains(v, simMarker) {
				return &Driver{NVML: n, Events: watcher(n), Version: v}, nil
			}
			if serr := n.Shutdown(); serr != nil {
				return nil, fmt.Errorf("close NVML: %w", serr)
			}
		} else if mode == ModeReal {
			return nil, fmt.Errorf("no NVIDIA driver: %w", err)
		}
	}
	lib := filepath.Join(simDir, "libnvidia-ml.so.1")
	if _, err := os.Stat(lib); err != nil {
		return nil, fmt.Errorf("no NVIDIA driver and no simulated GPU at %s: %w", simDir, err)
	}
	n := OpenNVML(lib)
	if err := n.Init(); err != nil {
		return nil, fmt.Errorf("simulated GPU at %s: %w", simDir, err)
	}
	v, err := n.DriverVersion()
	if err != nil {
		return nil, fmt.Errorf("simulated GPU at %s: %w", simDir, err)
	}
	return &Driver{NVML: n, Events: watcher(n), Simulated: true, LibDir: simDir, Version: v}, nil
}

// watcher is n's XID event watcher, nil if it has none.
func watcher(n NVML) XIDWatcher {
	w, _ := n.(XIDWatcher)
	return w
}
