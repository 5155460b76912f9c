package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/nodedev"
	"github.com/gpuslice/gpuslice/internal/nodemetrics"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// migNode is the node's GPUs in MIG mode (by position in parts.gpus), each
// offered as MIG instances instead of a whole GPU (docs/mig.md).
type migNode struct {
	nvml gpu.MIG
	gpus map[int]devices.MIGGPU
	// withheld: GPUs in MIG mode whose instances NVML cannot describe.
	withheld map[int]bool
}

// findMIG reads, for each GPU NVML says is in MIG mode, its profiles and
// instances; which instances claims made comes from the DRA checkpoint
// (by placement: one a crash left unrecorded is a claim's too, and the
// driver's recovery destroys it). A GPU not MIG-capable, with MIG mode off
// or unknown is a whole GPU; one in MIG mode NVML cannot describe is
// withheld (no device of it is offered). Only a corrupt checkpoint is an
// error.
func (p *parts) findMIG(ctx context.Context, ckPath string) (migNode, error) {
	out := migNode{gpus: map[int]devices.MIGGPU{}, withheld: map[int]bool{}}
	m, ok := p.drv.NVML.(gpu.MIG)
	if !ok {
		return out, nil
	}
	out.nvml = m
	ck, err := checkpoint.Load(ckPath)
	if err != nil {
		return out, err
	}
	for i, g := range p.gpus {
		f := p.found[i]
		on, pending, err := m.MIGMode(f.Index)
		switch {
		case errors.Is(err, gpu.ErrNoMIG):
			continue
		case err != nil:
			klog.FromContext(ctx).Error(err, "GPU's MIG mode unknown: offered whole", "gpu", g.UUID)
			continue
		case !on:
			if pending {
				klog.FromContext(ctx).Info("GPU's MIG mode is on after its next reset; offered whole until then", "gpu", g.UUID)
			}
			continue
		}
		mg, err := describeMIG(m, f, g.Minor)
		if err != nil {
			// In MIG mode the GPU is no device of its own: not offered at all.
			klog.FromContext(ctx).Error(err, "GPU in MIG mode withheld: NVML cannot describe its MIG instances", "gpu", g.UUID)
			out.withheld[i] = true
			continue
		}
		ours := oursIn(ck, g.UUID, mg.Instances)
		out.gpus[i] = devices.MIGGPU{GPU: mg, DriverVersion: p.drv.Version, Units: api.DefaultUnitsPerGPU,
			Ours: func(gi uint32) bool { return ours[gi] }}
		klog.FromContext(ctx).Info("GPU in MIG mode: offered as MIG instances", "gpu", g.UUID,
			"profiles", len(mg.Profiles), "instances", len(mg.Instances))
	}
	return out, nil
}

func describeMIG(m gpu.MIG, f gpu.Device, minor uint32) (nodedev.MIGGPU, error) {
	ps, err := m.MIGProfiles(f.Index)
	if err != nil {
		return nodedev.MIGGPU{}, err
	}
	ins, err := m.MIGInstances(f.Index)
	if err != nil {
		return nodedev.MIGGPU{}, err
	}
	return nodedev.MIGGPU{GPU: nodedev.FromNVML(f, minor), Profiles: ps, Instances: ins}, nil
}

// oursIn are the GPU instances of GPU uuid that claims of the checkpoint
// hold as made on demand.
func oursIn(ck checkpoint.Data, uuid string, ins []gpu.MIGInstance) map[uint32]bool {
	out := map[uint32]bool{}
	for _, c := range ck.Claims {
		for _, d := range c.Devices {
			r := d.MIG
			if r == nil || !r.OnDemand || r.ParentUUID != uuid {
				continue
			}
			for _, in := range ins {
				if in.ProfileID == r.ProfileID && in.Placement.Start == r.Start {
					out[in.GI] = true
				}
			}
		}
	}
	return out
}

// draGPUs adds the MIG devices of the node's MIG GPUs to the driver's
// GPUs (by device name), each with its GPU's node and health.
func (n migNode) draGPUs(gpus map[string]dra.GPU) {
	for _, g := range n.gpus {
		for _, slot := range nodedev.Layout(g.GPU, g.Ours) {
			gpus[slot.Name()] = dra.GPU{UUID: slot.Parent.UUID, Minor: slot.Parent.Minor, Healthy: true,
				MemoryBytes: slot.MemoryBytes() / devices.MemoryStep * devices.MemoryStep, Units: g.Units, MIG: &slot}
		}
	}
}

// build is the MIG GPUs' counter sets and devices, each GPU's devices with
// its taints (by position in parts.gpus), and the names of each GPU's
// devices.
func (n migNode) build(ts [][]resourceapi.DeviceTaint) ([]resourceapi.CounterSet, []resourceapi.Device, map[int][]string, error) {
	var sets []resourceapi.CounterSet
	var devs []resourceapi.Device
	names := map[int][]string{}
	for i := range len(ts) {
		g, ok := n.gpus[i]
		if !ok {
			continue
		}
		g.Taints = ts[i]
		set, d, err := devices.BuildMIG(g)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("DRA MIG devices: %w", err)
		}
		sets, devs = append(sets, set), append(devs, d...)
		for _, x := range d {
			names[i] = append(names[i], x.Name)
		}
	}
	return sets, devs, names, nil
}

// watchMIG reports each prepared claim whose MIG instance is destroyed
// under its pods (by hand, nvidia-smi, a GPU reset): a Warning event on the
// claim and on each pod it is reserved for, once per instance, every
// health period until ctx ends. The claim keeps its record: deleting its
// pods unprepares it, and nothing else is destroyed (an instance made
// again at its placement is someone else's).
func (p *parts) watchMIG(ctx context.Context, d *dra.Driver, mig migNode) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: p.cs.CoreV1().Events("")})
	defer b.Shutdown()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "gpuslice-node", Host: p.cfg.NodeName})
	told := map[string]bool{}
	period := p.cfg.HealthPeriod
	if period <= 0 {
		period = 10 * time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if p.met != nil {
			p.met.SetMIGInstances(mig.instances(ctx, d))
		}
		lost, err := d.LostMIGs()
		if err != nil {
			klog.FromContext(ctx).Error(err, "MIG instances of prepared claims not checked")
			continue
		}
		for _, l := range lost {
			if told[l.UID+"/"+l.UUID] {
				continue
			}
			told[l.UID+"/"+l.UUID] = true
			p.tellLost(ctx, rec, l)
		}
	}
}

func (p *parts) tellLost(ctx context.Context, rec record.EventRecorder, l dra.LostMIG) {
	const reason = "MIGInstanceLost"
	msg := fmt.Sprintf("MIG instance %s (device %s) was destroyed under the claim's pods; they have no GPU until they are deleted",
		l.UUID, l.Device)
	klog.FromContext(ctx).Info("MIG instance destroyed under a prepared claim", "claim", l.Namespace+"/"+l.Name, "uuid", l.UUID)
	c, err := p.cs.ResourceV1().ResourceClaims(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil || string(c.UID) != l.UID {
		return // the claim is gone: its Unprepare comes
	}
	rec.Event(c, corev1.EventTypeWarning, reason, msg)
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: r.Name, UID: r.UID}}
			rec.Event(pod, corev1.EventTypeWarning, reason, msg)
		}
	}
}

// instances are the node's MIG instances for the metrics, each with the
// number of prepared claims holding it.
func (n migNode) instances(ctx context.Context, d *dra.Driver) []nodemetrics.MIGInstance {
	held, onDemand := map[string]int{}, map[string]bool{}
	for _, c := range d.Prepared() {
		for _, dev := range c.Devices {
			if dev.MIG != nil && dev.MIG.UUID != "" {
				held[dev.MIG.UUID]++
				onDemand[dev.MIG.UUID] = onDemand[dev.MIG.UUID] || dev.MIG.OnDemand
			}
		}
	}
	var out []nodemetrics.MIGInstance
	for _, g := range n.gpus {
		ins, err := n.nvml.MIGInstances(int(g.GPU.GPU.Index))
		if err != nil {
			klog.FromContext(ctx).Error(err, "MIG instances not listed", "gpu", g.GPU.GPU.UUID)
			continue
		}
		g.GPU.Instances = ins
		ours := map[uint32]bool{}
		for _, in := range ins {
			ours[in.GI] = onDemand[in.UUID] || g.Ours(in.GI)
		}
		for _, m := range nodedev.Layout(g.GPU, func(gi uint32) bool { return ours[gi] }) {
			if m.Instance == nil || !m.Instance.HasCI {
				continue
			}
			by := "admin"
			if !m.Static {
				by = "claim"
			}
			out = append(out, nodemetrics.MIGInstance{GPU: m.Parent.UUID, UUID: m.Instance.UUID, Profile: m.Profile.Name,
				Placement: m.Placement.Start, MadeBy: by, Claims: held[m.Instance.UUID]})
		}
	}
	return out
}
