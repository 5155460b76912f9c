package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/gpurequest"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/nodedev"
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
	// MIG is the MIG instance the device is (nil: a whole GPU): UUID and
	// Minor are its GPU's, MemoryBytes and Units the instance's.
	MIG *nodedev.MIG
}

// plan is what preparing one claim does: its devices on this node and its
// group's settings.
type plan struct {
	devices  []checkpoint.Device
	settings group.Settings
	gateOff  bool
	// admin: every device of the claim is for admin access (no group).
	admin bool
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
	var req gpurequest.Request
	ours := ourResults(claim, pool)
	admin, err := adminOnly(claim, ours)
	if err != nil {
		return p, err
	}
	requests := make([]string, 0, len(ours))
	for _, r := range ours {
		requests = append(requests, r.Request)
		g, ok := gpus[r.Device]
		if !ok {
			return p, fmt.Errorf("device %s is not a GPU of this node", r.Device)
		}
		d := checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device, UUID: g.UUID, AdminAccess: admin}
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
		cl.Share = cl.Share || d.Units > 0
		req.GPUs = append(req.GPUs, gpurequest.GPU{Units: d.Units, Total: g.Units, Memory: uint64(d.Memory)})
		p.gateOff = p.gateOff || g.MPS
		p.devices = append(p.devices, d)
	}
	if len(p.devices) == 0 {
		return p, fmt.Errorf("claim %s/%s has no device of driver %s in pool %s", claim.Namespace, claim.Name, DriverName, pool)
	}
	byRequest, err := configsOf(claim, requests)
	if err != nil {
		return p, err
	}
	if p.admin = admin; admin {
		return p, nil // no group: nothing of the configuration applies
	}
	cfg, err := oneConfig(claim, byRequest)
	if err != nil {
		return p, err
	}
	if err := cfg.ValidateFor(cl); err != nil {
		return p, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	p.settings, err = settingsOf(cfg, req)
	return p, err
}

// ourResults are a claim's allocation results of this driver in pool.
func ourResults(claim *resourceapi.ResourceClaim, pool string) []resourceapi.DeviceRequestAllocationResult {
	var out []resourceapi.DeviceRequestAllocationResult
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == DriverName && r.Pool == pool {
			out = append(out, r)
		}
	}
	return out
}

// settingsOf is the group settings of a validated configuration of a claim
// whose devices are req.GPUs (gpurequest translates).
func settingsOf(cfg *drav1.GPUShareConfig, req gpurequest.Request) (group.Settings, error) {
	req.Priority, req.Spill = cfg.Priority, cfg.Spill
	if cfg.Slice != nil {
		req.Slice = cfg.Slice.Duration
	}
	if cfg.ShareCeiling != nil {
		req.ShareMax = float64(*cfg.ShareCeiling) / 100
	}
	if cfg.MemoryCeiling != nil {
		req.MemoryCeiling = uint64(cfg.MemoryCeiling.Value())
	}
	return req.Settings()
}
