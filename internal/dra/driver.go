// Package dra is the gpuslice.io DRA driver of the node agent: it prepares
// and unprepares the ResourceClaims the kubelet hands it (through the
// kubeletplugin helper of k8s.io/dynamic-resource-allocation). A prepared
// claim is one group (all containers and pods sharing the claim are its
// members) made through the groups manager with the claim's consumed
// capacity as its memory limit and share of GPU time and its GPUShareConfig
// for the rest, one CDI spec (internal/gpucdi ClaimSpec), and one entry in
// the checkpoint (internal/dra/checkpoint).
package dra

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// DriverName is the DRA driver's name (and the domain of its attributes).
const DriverName = "gpuslice.io"

// Groups is what the driver needs of the groups manager (internal/groupmgr).
type Groups interface {
	Create(ctx context.Context, name string, r groupmgr.Resources, o groupmgr.CreateOptions) error
	Set(ctx context.Context, name string, r groupmgr.Resources) error
	Remove(ctx context.Context, name string) error
}

// Config is the driver's configuration.
type Config struct {
	Pool       string         // the node's pool (its name)
	GPUs       map[string]GPU // by device name (devices.Name)
	Groups     Groups
	CDIDir     string
	Checkpoint string // path of the checkpoint file
	// Inject is what a container gets besides its GPUs (the device plugin's,
	// its CDIKind ignored: the claim's spec carries the device nodes).
	Inject deviceplugin.Inject
}

// Driver prepares and unprepares claims. Safe for concurrent use (calls are
// serialized: the kubeletplugin helper serializes them too).
type Driver struct {
	cfg Config
	mu  sync.Mutex
	ck  checkpoint.Data
}

// New returns a driver with the prepared claims of its checkpoint (a corrupt
// checkpoint is an error: the agent must not forget claims silently).
func New(cfg Config) (*Driver, error) {
	ck, err := checkpoint.Load(cfg.Checkpoint)
	if err != nil {
		return nil, err
	}
	cfg.Inject.CDIKind = ""
	return &Driver{cfg: cfg, ck: ck}, nil
}

// GroupName is the group of a claim.
func GroupName(uid types.UID) string { return "dra-" + string(uid) }

// Prepared returns the prepared claims (a copy of the checkpoint's).
func (d *Driver) Prepared() map[string]checkpoint.Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]checkpoint.Claim, len(d.ck.Claims))
	for k, v := range d.ck.Claims {
		out[k] = v
	}
	return out
}

// PrepareResourceClaims prepares each claim (kubeletplugin.DRAPlugin).
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		start := time.Now()
		devs, err := d.Prepare(ctx, c)
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
		if err != nil {
			klog.FromContext(ctx).Error(err, "DRA claim not prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID)
			continue
		}
		klog.FromContext(ctx).V(2).Info("DRA claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID,
			"duration", time.Since(start).String())
	}
	return out, nil
}

// Prepare prepares one claim: idempotent (a claim in the checkpoint is
// answered from it); on any error nothing of it stays applied.
func (d *Driver) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid := string(claim.UID)
	if c, ok := d.ck.Claims[uid]; ok {
		return result(c), nil
	}
	p, err := planClaim(claim, d.cfg.Pool, d.cfg.GPUs)
	if err != nil {
		return nil, err
	}
	c := checkpoint.Claim{Namespace: claim.Namespace, Name: claim.Name, Group: GroupName(claim.UID),
		CDIDevice: gpucdi.ClaimDevice(uid), Devices: p.devices}
	if err := d.apply(ctx, uid, c, p); err != nil {
		return nil, errors.Join(err, d.undo(ctx, uid, c.Group))
	}
	return result(c), nil
}

// apply makes the claim's group, CDI spec and checkpoint entry, in that order.
func (d *Driver) apply(ctx context.Context, uid string, c checkpoint.Claim, p plan) error {
	if err := d.cfg.Groups.Create(ctx, c.Group, groupmgr.Resources{Settings: p.settings},
		groupmgr.CreateOptions{Container: true, GateOff: p.gateOff}); err != nil {
		return fmt.Errorf("claim %s/%s: group %s: %w", c.Namespace, c.Name, c.Group, err)
	}
	spec, err := d.spec(uid, c)
	if err == nil {
		err = gpucdi.WriteClaim(d.cfg.CDIDir, uid, spec)
	}
	if err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	d.ck.Claims[uid] = c
	if err := checkpoint.Save(d.cfg.Checkpoint, d.ck); err != nil {
		delete(d.ck.Claims, uid)
		return err
	}
	return nil
}

// spec is the claim's CDI spec: what the device plugin would give one
// container holding the claim's GPUs, in the claim's group.
func (d *Driver) spec(uid string, c checkpoint.Claim) (*specs.Spec, error) {
	cand := deviceplugin.Candidate{Namespace: c.Namespace, Name: c.Name, Container: "claim"}
	nodeGPUs := map[string]gpuset.GPU{}
	for _, dev := range c.Devices {
		g := d.cfg.GPUs[dev.Device]
		nodeGPUs[g.UUID] = gpuset.GPU{UUID: g.UUID, Minor: g.Minor, Healthy: g.Healthy}
		cand.GPUs = append(cand.GPUs, api.GPUAssignment{UUID: g.UUID, Units: dev.Units, MemoryBytes: dev.Memory,
			Exclusive: dev.Units == 0})
	}
	r, err := d.cfg.Inject.Response(cand, nodeGPUs, c.Group)
	if err != nil {
		return nil, err
	}
	return gpucdi.ClaimSpec(uid, r)
}

// undo removes what apply may have made of a claim.
func (d *Driver) undo(ctx context.Context, uid, group string) error {
	return errors.Join(d.cfg.Groups.Remove(ctx, group), gpucdi.RemoveClaim(d.cfg.CDIDir, uid))
}

func result(c checkpoint.Claim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(c.Devices))
	for _, dev := range c.Devices {
		kd := kubeletplugin.Device{Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device,
			CDIDeviceIDs: []string{c.CDIDevice}}
		if dev.ShareID != "" {
			id := types.UID(dev.ShareID)
			kd.ShareID = &id
		}
		out = append(out, kd)
	}
	return out
}

// UnprepareResourceClaims unprepares each claim (kubeletplugin.DRAPlugin).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.Unprepare(ctx, c.UID)
	}
	return out, nil
}

// Unprepare removes a claim's group (its memory and time are free at once),
// CDI spec and checkpoint entry; an unknown claim is no error.
func (d *Driver) Unprepare(ctx context.Context, uid types.UID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.ck.Claims[string(uid)]
	if !ok {
		return nil
	}
	if err := d.undo(ctx, string(uid), c.Group); err != nil {
		return fmt.Errorf("unprepare claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	delete(d.ck.Claims, string(uid))
	return checkpoint.Save(d.cfg.Checkpoint, d.ck)
}

// HandleError logs background errors (ResourceSlice publishing); none is
// fatal to the node agent, whose device plugin keeps serving.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus: health is published as device taints in the
// ResourceSlice instead.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
