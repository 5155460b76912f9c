package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/nodemetrics"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// maxStatusAge: a daemon run by this process whose status.json is older than
// this is stuck (it refreshes it every quarter second); liveness fails.
const maxStatusAge = 30 * time.Second

// probes are the agent's liveness and readiness checks.
func probes(cfg Config, plugins []*deviceplugin.Plugin, informer cache.InformerSynced) (live, ready []nodemetrics.Check) {
	daemonStatus := nodemetrics.Check{Name: "daemon-status", Run: func(context.Context) error {
		st, err := nodestatus.Read(cfg.RunDir)
		if err != nil {
			return err
		}
		if age := time.Since(st.Time); age > maxStatusAge {
			return fmt.Errorf("node daemon status is %s old", age.Round(time.Second))
		}
		return nil
	}}
	if cfg.RunDaemon {
		live = append(live, daemonStatus)
	}
	ready = []nodemetrics.Check{
		{Name: "daemon", Run: func(ctx context.Context) error {
			if !client.Reachable(ctx, cfg.Socket) {
				return fmt.Errorf("node daemon does not answer on %s", cfg.Socket)
			}
			return nil
		}},
		{Name: "device-plugins", Run: func(context.Context) error {
			for _, p := range plugins {
				if !p.Registered() {
					return fmt.Errorf("device plugin %s not registered with the kubelet", p.ResourceName())
				}
			}
			return nil
		}},
		{Name: "pod-informer", Run: func(context.Context) error {
			if !informer() {
				return errors.New("pod informer not synced")
			}
			return nil
		}},
	}
	return live, ready
}

// newMetrics makes the agent's metrics: the daemon's status read at each
// scrape, and the agent's own instruments.
func newMetrics(cfg Config) *nodemetrics.Metrics {
	return nodemetrics.New(nodemetrics.Config{MaxGroups: cfg.MetricsMaxGroups,
		Status: func() (*nodestatus.Status, error) { return nodestatus.Read(cfg.RunDir) }})
}

// writeCDISpec writes the CDI spec of the node's GPUs when the agent names
// its own CDI devices (the control devices that exist are spec-wide).
func writeCDISpec(cfg Config, gpus []gpuset.GPU) error {
	if cfg.CDIKind != gpucdi.Kind {
		return nil
	}
	gs := make([]gpucdi.GPU, 0, len(gpus))
	for _, g := range gpus {
		gs = append(gs, gpucdi.GPU{UUID: g.UUID, Minor: g.Minor})
	}
	var control []string
	for _, d := range cfg.ControlDevices {
		if _, err := os.Stat(d); err == nil {
			control = append(control, d)
		}
	}
	spec, err := gpucdi.Spec(gs, cfg.DevRoot, control)
	if err != nil {
		return err
	}
	return gpucdi.Write(cfg.CDISpecDir, spec)
}
