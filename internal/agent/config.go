// Package agent is gpuslice-node: on each node it runs the time-slice daemon, the
// kubelet device plugin, the resource-table publisher (the node's GPUNode
// row), and the hot-plug reconciler that keeps every running container's GPU
// devices equal to its assignment (adding and removing them in place when the
// assignment changes), reporting what it applied on the pod. Wiring only; the logic lives in internal/deviceplugin,
// internal/hotplug, internal/gpunoderow and internal/timeslice.
package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/gpuslice/gpuslice/internal/gpucdi"
)

// Config is the agent's configuration: every node setting's value
// (NodeValues, generated from the rows of NodeSettings: their help and flags
// are there, docs/node-agent.md has the table) and where /proc is.
type Config struct {
	NodeValues
	// ProcRoot is where /proc is mounted.
	ProcRoot string
}

// DefaultConfig returns the defaults for this environment (each node
// setting's, NodeSettings).
func DefaultConfig(getenv func(string) string) Config {
	c := Config{ProcRoot: "/proc"}
	for _, s := range NodeSettings() {
		if s.setDefault != nil {
			s.setDefault(&c, getenv)
		}
	}
	return c
}

// Validate checks c: each node setting's range (NodeSettings), and those
// that depend on another. Each error names the setting by its
// configuration file field and flag (internal/nodeconfig).
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("nodeName (--node-name, $NODE_NAME) is required"))
	}
	for _, s := range NodeSettings() {
		if s.check != nil {
			errs = append(errs, s.check(&c))
		}
	}
	if c.ProcRoot != "" && !filepath.IsAbs(c.ProcRoot) {
		errs = append(errs, fmt.Errorf("proc root %q: want an absolute path", c.ProcRoot))
	}
	if c.CDIKind == gpucdi.Kind && !filepath.IsAbs(c.CDISpecDir) {
		errs = append(errs, fmt.Errorf("devicePlugin.cdiSpecDir (--cdi-spec-dir) %q: want an absolute path", c.CDISpecDir))
	}
	return errors.Join(append(errs, c.validateBusy()...)...)
}

// validateBusy checks the DRA settings: one path per node, and the busy
// taint's thresholds below one another (0 above: off).
func (c Config) validateBusy() []error {
	var errs []error
	if c.DRA && c.DevicePlugin {
		errs = append(errs, errors.New("dra.enabled (--dra) and devicePlugin.enabled (--device-plugin) are both true: "+
			"offer the node's GPUs through one path (--device-plugin=false with --dra); the stock scheduler and gpuslice-scheduler would book a GPU twice"))
	}
	if c.DRABusyAbove > 0 && (c.DRABusyBelow < 0 || c.DRABusyBelow >= c.DRABusyAbove) {
		errs = append(errs, fmt.Errorf("dra.busyBelow (--dra-busy-below) %d: want 0..%d (below dra.busyAbove, for hysteresis)",
			c.DRABusyBelow, c.DRABusyAbove-1))
	}
	return errs
}
