package nodeconfig

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/logflags"
	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

// FromAgent is the file form of the agent's configuration c (its defaults,
// before a file is read onto them), with the default logging configuration.
func FromAgent(c agent.Config) v1.NodeConfig {
	return v1.NodeConfig{
		NodeName: c.NodeName, Kubeconfig: c.Kubeconfig, Driver: string(c.Driver), SimDir: c.SimDir,
		Library: c.Library, DevRoot: c.DevRoot, ControlDevices: append([]string(nil), c.ControlDevices...),
		Resync: duration(c.Resync), PublishPeriod: duration(c.PublishPeriod),
		Daemon: v1.Daemon{Enabled: c.RunDaemon, Binary: c.DaemonBinary, RunDir: c.RunDir, Socket: c.Socket},
		DevicePlugin: v1.DevicePlugin{Enabled: c.DevicePlugin, PluginDir: c.PluginDir, PodResources: c.PodResources, SlotsPerGPU: c.SlotsPerGPU,
			CDIKind: c.CDIKind, CDISpecDir: c.CDISpecDir},
		Runtime: v1.Runtime{Endpoint: c.RuntimeEndpoint, Timeout: duration(c.RuntimeTimeout)},
		Sharing: v1.Sharing{Mode: c.Sharing, MPS: v1.MPS{Control: c.MPSControl, Dir: c.MPSDir,
			Servers: c.MPSServers, UnitsPerClient: c.MPSUnitsPerClient}},
		Metrics: v1.Metrics{Address: c.MetricsAddress, MaxGroups: c.MetricsMaxGroups},
		Health:  v1.Health{Enabled: c.HealthChecks, Period: duration(c.HealthPeriod), SkipXIDs: append([]uint64(nil), c.HealthSkipXIDs...)},
		DRA: v1.DRA{Enabled: c.DRA, PluginDir: c.DRAPluginDir, RegistrarDir: c.DRARegistrarDir, CDIDir: c.DRACDIDir,
			BusyAbove: c.DRABusyAbove, BusyBelow: c.DRABusyBelow, BusyHold: duration(c.DRABusyHold)},
		Logging: logflags.Default(),
	}
}

// ToAgent is the agent's configuration from the file form n; settings the
// file has not (ProcRoot) come from base. A value that does not parse is
// an error naming its field.
func ToAgent(n v1.NodeConfig, base agent.Config) (agent.Config, error) {
	c := base
	var errs []error
	c.NodeName, c.Kubeconfig, c.SimDir, c.Library, c.DevRoot = n.NodeName, n.Kubeconfig, n.SimDir, n.Library, n.DevRoot
	c.ControlDevices = append([]string(nil), n.ControlDevices...)
	mode, err := gpu.ParseMode(n.Driver)
	errs = append(errs, fieldErr("driver", err))
	c.Driver = mode
	c.RunDaemon, c.DaemonBinary, c.RunDir, c.Socket = n.Daemon.Enabled, n.Daemon.Binary, n.Daemon.RunDir, n.Daemon.Socket
	p := n.DevicePlugin
	c.DevicePlugin = p.Enabled
	c.PluginDir, c.PodResources, c.SlotsPerGPU, c.CDIKind, c.CDISpecDir = p.PluginDir, p.PodResources, p.SlotsPerGPU, p.CDIKind, p.CDISpecDir
	c.RuntimeEndpoint = n.Runtime.Endpoint
	c.Sharing, c.MPSControl, c.MPSDir = n.Sharing.Mode, n.Sharing.MPS.Control, n.Sharing.MPS.Dir
	c.MPSServers, c.MPSUnitsPerClient = n.Sharing.MPS.Servers, n.Sharing.MPS.UnitsPerClient
	c.MetricsAddress, c.MetricsMaxGroups = n.Metrics.Address, n.Metrics.MaxGroups
	c.HealthChecks, c.HealthSkipXIDs = n.Health.Enabled, append([]uint64(nil), n.Health.SkipXIDs...)
	c.DRA, c.DRAPluginDir, c.DRARegistrarDir, c.DRACDIDir = n.DRA.Enabled, n.DRA.PluginDir, n.DRA.RegistrarDir, n.DRA.CDIDir
	c.DRABusyAbove, c.DRABusyBelow = n.DRA.BusyAbove, n.DRA.BusyBelow
	for _, d := range []struct {
		field string
		in    v1.Duration
		out   *time.Duration
	}{
		{"resync", n.Resync, &c.Resync},
		{"publishPeriod", n.PublishPeriod, &c.PublishPeriod},
		{"runtime.timeout", n.Runtime.Timeout, &c.RuntimeTimeout},
		{"health.period", n.Health.Period, &c.HealthPeriod},
		{"dra.busyHold", n.DRA.BusyHold, &c.DRABusyHold},
	} {
		v, err := time.ParseDuration(string(d.in))
		errs = append(errs, fieldErr(d.field, err))
		*d.out = v
	}
	for _, x := range n.Health.SkipXIDs {
		if x > 1<<32-1 {
			errs = append(errs, fieldErr("health.skipXIDs", fmt.Errorf("XID %d: want at most %d", x, uint64(1<<32-1))))
		}
	}
	return c, errors.Join(errs...)
}

func duration(d time.Duration) v1.Duration { return v1.Duration(d.String()) }

// fieldErr names field in err (nil: nil), with its flag.
func fieldErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", fieldName(field), err)
}

// fieldName is field with its flag: "resync (--resync)".
func fieldName(field string) string {
	for _, s := range newFlagSet(&v1.NodeConfig{}).settings {
		if s.field == field {
			return field + " (--" + s.flag + ")"
		}
	}
	return field
}
