package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/policy"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// GPU is one GPU of the node as the driver knows it, by device name.
type GPU struct {
	UUID        string
	Minor       uint32
	MemoryBytes int64 // the device's memory capacity (devices.Build's, whole MiB)
	Units       int64 // the GPU's units total
	MPS         bool
	Healthy     bool
}

// plan is what preparing one claim does: its devices on this node and its
// group's settings.
type plan struct {
	devices  []checkpoint.Device
	settings group.Settings
	gateOff  bool
}

// planClaim reads a claim's allocation (the results of this driver in this
// node's pool) and its configuration into a plan; a bad configuration is an
// error naming the field, and nothing is applied.
func planClaim(claim *resourceapi.ResourceClaim, pool string, gpus map[string]GPU) (plan, error) {
	var p plan
	if claim.Status.Allocation == nil {
		return p, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	cl := drav1.Claim{}
	share := 0.0
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != pool {
			continue
		}
		g, ok := gpus[r.Device]
		if !ok {
			return p, fmt.Errorf("device %s is not a GPU of this node", r.Device)
		}
		d := checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device, UUID: g.UUID}
		if r.ShareID != nil {
			d.ShareID = string(*r.ShareID)
		}
		if q, ok := r.ConsumedCapacity[devices.CapacityUnits]; ok && q.Value() < g.Units {
			d.Units = q.Value()
		}
		if q, ok := r.ConsumedCapacity[devices.CapacityMemory]; ok && q.Value() < g.MemoryBytes {
			d.Memory = q.Value()
		}
		if d.Memory > 0 && (cl.Memory == 0 || d.Memory < cl.Memory) {
			cl.Memory = d.Memory
		}
		if d.Units > 0 {
			cl.Share = true
			if f := float64(d.Units) / float64(g.Units); share == 0 || f < share {
				share = f
			}
		}
		p.gateOff = p.gateOff || g.MPS
		p.devices = append(p.devices, d)
	}
	if len(p.devices) == 0 {
		return p, fmt.Errorf("claim %s/%s has no device of driver %s in pool %s", claim.Namespace, claim.Name, DriverName, pool)
	}
	cfg, err := claimConfig(claim)
	if err != nil {
		return p, err
	}
	if err := cfg.ValidateFor(cl); err != nil {
		return p, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	p.settings, err = settingsOf(cfg, cl, share)
	return p, err
}

// claimConfig is the claim's GPUShareConfig, defaulted: its annotation
// gpuslice.io/share-config (the live change), else the last opaque
// configuration of this driver (the claim's own come after its class's),
// else DefaultConfig.
func claimConfig(claim *resourceapi.ResourceClaim) (*drav1.GPUShareConfig, error) {
	cfg := drav1.DefaultConfig()
	for i, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != DriverName {
			continue
		}
		d, err := drav1.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: config[%d] (from the %s): %w", claim.Namespace, claim.Name, i,
				map[resourceapi.AllocationConfigSource]string{resourceapi.AllocationConfigSourceClass: "DeviceClass",
					resourceapi.AllocationConfigSourceClaim: "claim"}[c.Source], err)
		}
		d.Default()
		cfg = d
	}
	if raw, ok := claim.Annotations[drav1.ShareConfigAnnotation]; ok {
		d, err := drav1.Decode([]byte(raw))
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: annotation %s: %w", claim.Namespace, claim.Name, drav1.ShareConfigAnnotation, err)
		}
		d.Default()
		cfg = d
	}
	return cfg, nil
}

// settingsOf turns a validated configuration of a claim holding share (of the
// GPU's time, 0 for whole GPUs) and cl.Memory bytes into group settings.
func settingsOf(cfg *drav1.GPUShareConfig, cl drav1.Claim, share float64) (group.Settings, error) {
	s := group.Settings{Share: share, MemoryMax: uint64(cl.Memory)}
	var err error
	if s.Priority, err = policy.ParsePriority(cfg.Priority); err != nil {
		return s, err
	}
	if cfg.Slice != nil {
		s.Slice = cfg.Slice.Duration
	}
	if cfg.ShareCeiling != nil {
		s.ShareMax = float64(*cfg.ShareCeiling) / 100
	}
	if cfg.MemoryCeiling != nil {
		s.MemoryMin, s.MemoryMax, s.MemorySpill = uint64(cl.Memory), uint64(cfg.MemoryCeiling.Value()), cfg.Spill
	}
	return s, s.Validate()
}
