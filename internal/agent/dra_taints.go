package agent

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/dra/taints"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/health"
)

// draTaints keeps the DRA devices' taints (internal/dra/taints) current:
// the health monitor's changes come through p.draKick at once, the
// utilization is measured every health period while the busy taint is on.
type draTaints struct {
	p     *parts
	node  *taints.Node
	clock clock.WithTicker
}

func newDRATaints(p *parts) *draTaints {
	c := p.cfg
	return &draTaints{p: p, clock: clock.RealClock{},
		node: taints.NewNode(len(p.gpus), float64(c.DRABusyAbove), float64(c.DRABusyBelow), c.DRABusyHold)}
}

// update measures and decides every GPU's taints now.
func (d *draTaints) update() ([][]resourceapi.DeviceTaint, bool) {
	hs := make([]taints.Health, len(d.p.gpus))
	util := make([]float64, len(d.p.gpus))
	for i, g := range d.p.gpus {
		hs[i] = taints.Health{Healthy: true}
		if d.p.cfg.HealthChecks && d.p.mon != nil {
			hs[i] = taintHealth(d.p.mon.status(g.UUID))
		}
		util[i] = -1
		if d.node.BusyOn() {
			if u, err := d.p.drv.NVML.Utilization(d.p.found[i].Index); err == nil {
				util[i] = float64(u.GPU)
			}
		}
	}
	return d.node.Update(hs, util, d.clock.Now())
}

// taintHealth is a GPU's health as the taint sees it: its value names the
// cause ("xid-79", "query", "events"), a valid label value.
func taintHealth(s health.Status) taints.Health {
	h := taints.Health{Healthy: s.Healthy, Lost: s.Lost(), Reason: string(s.Cause)}
	if s.Cause == health.CauseXID {
		h.Reason = fmt.Sprintf("xid-%d", s.XID)
	}
	return h
}

// run republishes the slice whenever a GPU's taints change, until ctx ends.
func (d *draTaints) run(ctx context.Context, publish func([][]resourceapi.DeviceTaint) error) error {
	var tick <-chan time.Time
	if d.node.BusyOn() {
		t := d.clock.NewTicker(d.p.cfg.HealthPeriod)
		defer t.Stop()
		tick = t.C()
	}
	log := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.p.draKick:
		case <-tick:
		}
		taints, changed := d.update()
		if !changed {
			continue
		}
		if err := publish(taints); err != nil {
			return err
		}
		log.Info("DRA device taints published", "taints", taintSummary(d.p.gpus, taints))
	}
}

// taintSummary names each tainted device's taints for the log.
func taintSummary(gpus []gpuset.GPU, ts [][]resourceapi.DeviceTaint) map[string][]string {
	out := map[string][]string{}
	for i, t := range ts {
		for _, tn := range t {
			name := devices.Name(gpus[i].Index)
			out[name] = append(out[name], tn.Key+"="+tn.Value+":"+string(tn.Effect))
		}
	}
	return out
}
