package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/pkg/api"
)

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

// Prepare prepares one claim, in recorded steps: PrepareStarted saved, the
// group made, the CDI spec written, PrepareCompleted saved. Idempotent (a
// claim PrepareCompleted is answered from the checkpoint; one an earlier
// call left half done is undone first); on any error what was made is
// removed again, and what cannot be stays recorded for the next call.
func (d *Driver) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid := string(claim.UID)
	if c, ok := d.ck.Claims[uid]; ok {
		if c.State == checkpoint.PrepareCompleted {
			return result(uid, c), nil
		}
		if err := d.remove(ctx, uid, c); err != nil {
			return nil, fmt.Errorf("claim %s/%s: an earlier %s not undone: %w", c.Namespace, c.Name, c.State, err)
		}
	}
	p, err := planClaim(claim, d.cfg.Pool, d.cfg.GPUs)
	if err != nil {
		return nil, err
	}
	if err := d.planMIG(p.devices); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	c := checkpoint.Claim{State: checkpoint.PrepareStarted, Namespace: claim.Namespace, Name: claim.Name,
		CDIDevice: gpucdi.ClaimDevice(uid), Devices: p.devices}
	if !p.admin {
		c.Group = GroupName(claim.UID)
	}
	if err := d.save(uid, &c); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := d.make(ctx, uid, c, p); err != nil {
		return nil, errors.Join(err, d.remove(ctx, uid, d.ck.Claims[uid]))
	}
	return result(uid, d.ck.Claims[uid]), nil
}

// make makes the claim's group and CDI spec and records it prepared.
func (d *Driver) make(ctx context.Context, uid string, c checkpoint.Claim, p plan) error {
	if err := d.fault(StepPrepareStarted); err != nil {
		return err
	}
	if err := d.makeMIG(uid, &c); err != nil {
		return err
	}
	if c.Group != "" {
		if err := d.cfg.Groups.Create(ctx, c.Group, groupmgr.Resources{Settings: p.settings},
			groupmgr.CreateOptions{Container: true, GateOff: p.gateOff}); err != nil {
			return fmt.Errorf("claim %s/%s: group %s: %w", c.Namespace, c.Name, c.Group, err)
		}
	}
	if err := d.fault(StepGroupCreated); err != nil {
		return err
	}
	spec, err := d.spec(uid, c)
	if err == nil {
		err = gpucdi.WriteClaim(d.cfg.CDIDir, uid, spec)
	}
	if err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	if err := d.fault(StepSpecWritten); err != nil {
		return err
	}
	c.State = checkpoint.PrepareCompleted
	if err := d.save(uid, &c); err != nil {
		return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return d.fault(StepPrepareCompleted)
}

// spec is the claim's CDI spec: per request of the claim (one device named
// by the claim's UID where it has one request, else one per request,
// cdiName), the container edits the device plugin would give one container
// holding the request's GPUs in the claim's group; for admin access (no
// group) the GPUs' nodes and the node's environment alone: no library,
// group or daemon socket, so nothing gates or limits it.
func (d *Driver) spec(uid string, c checkpoint.Claim) (*specs.Spec, error) {
	in := d.cfg.Inject
	in.DeviceGroups = true // a container may name several claims: each GPU in its claim's group
	if c.Group == "" {
		in.Library, in.Preload, in.RunDir, in.Socket, in.MPS = "", "", "", "", nil
	}
	byName := map[string]specs.ContainerEdits{}
	for _, req := range baseRequests(c) {
		cand := deviceplugin.Candidate{Namespace: c.Namespace, Name: c.Name, Container: "claim"}
		nodeGPUs := map[string]gpuset.GPU{}
		var devs []checkpoint.Device
		for _, dev := range c.Devices {
			if resourceclaim.BaseRequestRef(dev.Request) != req {
				continue
			}
			g := d.cfg.GPUs[dev.Device]
			id := g.UUID
			if dev.MIG != nil {
				id = dev.MIG.UUID // the instance: MIG-<uuid>
			}
			nodeGPUs[id] = gpuset.GPU{UUID: id, Minor: g.Minor, Healthy: g.Healthy}
			cand.GPUs = append(cand.GPUs, api.GPUAssignment{UUID: id, Units: dev.Units, MemoryBytes: dev.Memory,
				Exclusive: dev.Units == 0})
			devs = append(devs, dev)
		}
		e, err := in.Edits(cand, nodeGPUs, c.Group)
		if err != nil {
			return nil, err
		}
		d.migEdits(&e, devs)
		byName[cdiName(uid, c, req)] = e
	}
	return gpucdi.ClaimSpec(uid, byName)
}

// baseRequests are the claim's requests on the node (subrequests by their
// request), sorted.
func baseRequests(c checkpoint.Claim) []string {
	var out []string
	for _, dev := range c.Devices {
		if r := resourceclaim.BaseRequestRef(dev.Request); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// cdiName is the CDI device name (in the claim's spec) of the claim's
// request req: the claim's UID where it has one request (a container naming
// the claim or the request gets all of it), else "<UID>_<request>", so that
// a container naming one request of the claim gets that request's GPUs
// alone (the kubelet gives it the CDI devices of its request's devices).
func cdiName(uid string, c checkpoint.Claim, req string) string {
	if len(baseRequests(c)) == 1 {
		return uid
	}
	return uid + "_" + req
}

// result is the kubelet's answer for claim uid: each device with the CDI
// device of its request.
func result(uid string, c checkpoint.Claim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(c.Devices))
	for _, dev := range c.Devices {
		kd := kubeletplugin.Device{Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device,
			CDIDeviceIDs: []string{gpucdi.ClaimKind + "=" + cdiName(uid, c, resourceclaim.BaseRequestRef(dev.Request))}}
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

// Unprepare removes a claim in recorded steps: UnprepareStarted saved, the
// CDI spec and the group removed (its memory and time are free at once),
// the entry removed. An unknown claim is no error; a failed step leaves the
// claim UnprepareStarted, and the kubelet's next call (or a restarted
// driver) goes on from there.
func (d *Driver) Unprepare(ctx context.Context, uid types.UID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.ck.Claims[string(uid)]
	if !ok {
		return nil
	}
	if c.State != checkpoint.UnprepareStarted {
		c.State = checkpoint.UnprepareStarted
		if err := d.save(string(uid), &c); err != nil {
			return fmt.Errorf("unprepare claim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	if err := d.fault(StepUnprepareStarted); err != nil {
		return err
	}
	if err := d.remove(ctx, string(uid), c); err != nil {
		return fmt.Errorf("unprepare claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}

// remove removes what claim uid (recorded as c) may have made, CDI spec
// first (no new container gets the claim), then its group, then its entry.
// On error the entry stays, as it was.
func (d *Driver) remove(ctx context.Context, uid string, c checkpoint.Claim) error {
	if err := gpucdi.RemoveClaim(d.cfg.CDIDir, uid); err != nil {
		return err
	}
	if err := d.fault(StepSpecRemoved); err != nil {
		return err
	}
	if c.Group != "" {
		if err := d.cfg.Groups.Remove(ctx, c.Group); err != nil {
			return err
		}
	}
	if err := d.fault(StepGroupRemoved); err != nil {
		return err
	}
	if err := d.destroyMIG(uid, c); err != nil {
		return err
	}
	if err := d.save(uid, nil); err != nil {
		return err
	}
	return d.fault(StepUnprepareCompleted)
}
