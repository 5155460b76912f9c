package dra

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/nodedev"
)

// MIG is what the driver needs of NVML's MIG calls (internal/gpu.MIG).
type MIG interface {
	MIGInstances(index int) ([]gpu.MIGInstance, error)
	CreateMIG(index int, profile gpu.MIGProfile, at gpu.MIGPlacement) (gpu.MIGInstance, error)
	DestroyMIG(index int, gi uint32) error
	GPUIndex(uuid string) (int, error)
}

// MIGObserver counts the MIG instances the driver makes and destroys
// (internal/nodemetrics).
type MIGObserver interface {
	MIGMade()
	MIGDestroyed()
}

// The steps of a claim holding a MIG instance, besides Steps(): the
// instance made (after StepPrepareStarted) and destroyed (after
// StepGroupRemoved).
const (
	StepMIGMade      Step = "mig-instance-made"
	StepMIGDestroyed Step = "mig-instance-destroyed"
)

// MIGSteps lists the MIG steps.
func MIGSteps() []Step { return []Step{StepMIGMade, StepMIGDestroyed} }

// MIGMinorsFile is where the NVIDIA driver lists the minors of the
// /dev/nvidia-caps nodes that give access to MIG instances.
const MIGMinorsFile = "/proc/driver/nvidia-caps/mig-minors"

// planMIG records where each MIG device of a claim is and whose it is: an
// instance the admin made is used as it is (never destroyed); one made for
// claims (by another claim sharing it, or made now) is destroyed when no
// claim holds it any more.
func (d *Driver) planMIG(devs []checkpoint.Device) error {
	for i := range devs {
		m := d.cfg.GPUs[devs[i].Device].MIG
		if m == nil {
			continue
		}
		if d.cfg.MIG == nil {
			return fmt.Errorf("device %s is a MIG instance and the driver has no MIG access", devs[i].Device)
		}
		rec := &checkpoint.MIG{GPU: m.Parent.Index, ParentUUID: m.Parent.UUID, Profile: m.Profile.Name,
			ProfileID: m.Profile.ID, Start: m.Placement.Start, Size: m.Placement.Size}
		in, _, err := d.findMIG(rec)
		if err != nil {
			return fmt.Errorf("device %s: %w", devs[i].Device, err)
		}
		switch {
		case in == nil:
			rec.OnDemand = true
		case !in.HasCI:
			return fmt.Errorf("device %s: GPU instance %d has no compute instance (made by hand, half done?)", devs[i].Device, in.GI)
		default:
			rec.OnDemand = d.heldOnDemand(rec, "")
			rec.GI, rec.CI, rec.UUID = in.GI, in.CI, in.UUID
			devs[i].UUID = in.UUID
		}
		devs[i].MIG = rec
	}
	return nil
}

// IsMIG is whether the node's device of pool is a MIG instance.
func (d *Driver) IsMIG(pool, device string) bool {
	g, ok := d.cfg.GPUs[device]
	return ok && pool == d.cfg.Pool && g.MIG != nil
}

// parentOf is the index NVML gives rec's GPU now, found by its UUID every
// time: the index recorded may name another GPU after GPUs were added,
// removed or reordered. ok false: no GPU has that UUID (gone with its
// instances).
func (d *Driver) parentOf(rec *checkpoint.MIG) (int, bool, error) {
	if rec.ParentUUID == "" {
		return 0, false, fmt.Errorf("MIG %s at %d: no parent GPU recorded", rec.Profile, rec.Start)
	}
	i, err := d.cfg.MIG.GPUIndex(rec.ParentUUID)
	if errors.Is(err, gpu.ErrNoGPU) {
		klog.Background().Info("MIG instance's GPU not found", "gpu", rec.ParentUUID, "recordedIndex", rec.GPU, "err", err)
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("GPU %s: %w", rec.ParentUUID, err)
	}
	return i, true, nil
}

// findMIG is the instance of rec's profile at its placement on rec's GPU
// and that GPU's index now; nil if either is gone.
func (d *Driver) findMIG(rec *checkpoint.MIG) (*gpu.MIGInstance, int, error) {
	index, ok, err := d.parentOf(rec)
	if err != nil || !ok {
		return nil, 0, err
	}
	ins, err := d.cfg.MIG.MIGInstances(index)
	if err != nil {
		return nil, 0, fmt.Errorf("MIG instances of GPU %d (%s): %w", index, rec.ParentUUID, err)
	}
	for _, in := range ins {
		if in.ProfileID == rec.ProfileID && in.Placement.Start == rec.Start {
			return &in, index, nil
		}
	}
	return nil, index, nil
}

// heldOnDemand says whether a claim other than except holds rec's
// instance as one made on demand.
func (d *Driver) heldOnDemand(rec *checkpoint.MIG, except string) bool {
	for uid, c := range d.ck.Claims {
		if uid == except {
			continue
		}
		for _, dev := range c.Devices {
			if m := dev.MIG; m != nil && m.OnDemand && samePlace(m, rec) {
				return true
			}
		}
	}
	return false
}

func samePlace(a, b *checkpoint.MIG) bool {
	return a.ParentUUID == b.ParentUUID && a.ProfileID == b.ProfileID && a.Start == b.Start
}

// makeMIG makes each MIG instance of the claim not there yet, recording
// each one made (the claim still PrepareStarted).
func (d *Driver) makeMIG(uid string, c *checkpoint.Claim) error {
	for i := range c.Devices {
		rec := c.Devices[i].MIG
		if rec == nil || rec.UUID != "" {
			continue
		}
		m := d.cfg.GPUs[c.Devices[i].Device].MIG
		index, ok, err := d.parentOf(rec)
		if err == nil && !ok {
			err = fmt.Errorf("GPU %s: %w", rec.ParentUUID, gpu.ErrNoGPU)
		}
		if err != nil {
			return fmt.Errorf("claim %s/%s: MIG %s: %w", c.Namespace, c.Name, rec.Profile, err)
		}
		in, err := d.cfg.MIG.CreateMIG(index, m.Profile, m.Placement)
		if err != nil {
			return fmt.Errorf("claim %s/%s: MIG %s at %d on GPU %d: %w", c.Namespace, c.Name, rec.Profile, rec.Start, index, err)
		}
		if d.cfg.Observer != nil {
			d.cfg.Observer.MIGMade()
		}
		// A crash here leaves the instance unrecorded: recovery finds it
		// by its placement (destroyMIG).
		if err := d.fault(StepMIGMade); err != nil {
			return err
		}
		rec.GI, rec.CI, rec.UUID = in.GI, in.CI, in.UUID
		c.Devices[i].UUID = in.UUID
		if err := d.save(uid, c); err != nil {
			return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	return nil
}

// destroyMIG destroys the claim's on-demand instances no other claim holds,
// each found by its placement (a crash may have left the record without its
// ids) and, where recorded, its UUID (an instance destroyed under the claim
// and made again by someone else is not the claim's).
func (d *Driver) destroyMIG(uid string, c checkpoint.Claim) error {
	destroyed := false
	for _, dev := range c.Devices {
		rec := dev.MIG
		if rec == nil || !rec.OnDemand || d.heldOnDemand(rec, uid) {
			continue
		}
		if d.cfg.MIG == nil {
			return fmt.Errorf("claim %s/%s holds a MIG instance and the driver has no MIG access", c.Namespace, c.Name)
		}
		in, index, err := d.findMIG(rec)
		if err != nil {
			return err
		}
		if in == nil {
			continue // never made, destroyed under the claim, or gone with its GPU
		}
		if rec.UUID != "" && in.UUID != rec.UUID {
			// Destroyed under the claim and made again by someone else: not ours.
			klog.Background().Info("MIG instance at a claim's placement is another one now; left as it is",
				"claim", c.Namespace+"/"+c.Name, "recorded", rec.UUID, "found", in.UUID)
			continue
		}
		gi := in.GI
		if err := d.cfg.MIG.DestroyMIG(index, gi); err != nil {
			return fmt.Errorf("claim %s/%s: destroy MIG %s at %d on GPU %d: %w", c.Namespace, c.Name, rec.Profile, rec.Start, index, err)
		}
		destroyed = true
		if d.cfg.Observer != nil {
			d.cfg.Observer.MIGDestroyed()
		}
	}
	if !destroyed {
		return nil
	}
	return d.fault(StepMIGDestroyed)
}

// migEdits adds what a container of MIG instances needs besides its GPU's
// node: CUDA_VISIBLE_DEVICES naming the instances (siblings share the GPU's
// node) and, on a driver that lists them, the /dev/nvidia-caps nodes of
// each instance's GPU and compute instance (on the host under the node's
// device root, as the GPUs' nodes).
func (d *Driver) migEdits(e *specs.ContainerEdits, devs []checkpoint.Device) {
	var uuids []string
	table, err := os.ReadFile(d.cfg.MIGMinors)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.Background().Error(err, "MIG access nodes not listed", "file", d.cfg.MIGMinors)
	}
	for _, dev := range devs {
		if dev.MIG == nil {
			continue
		}
		uuids = append(uuids, dev.MIG.UUID)
		minor := d.cfg.GPUs[dev.Device].Minor
		for _, n := range nodedev.MIGCapNodes(table, minor, dev.MIG.GI, dev.MIG.CI) {
			host := filepath.Join(d.cfg.Inject.DevRoot, strings.TrimPrefix(n, "/dev/"))
			if _, err := os.Stat(host); err != nil {
				klog.Background().Error(err, "MIG access node missing", "node", host, "mig", dev.MIG.UUID)
				continue
			}
			e.DeviceNodes = append(e.DeviceNodes, &specs.DeviceNode{Path: n, HostPath: host, Permissions: "rw"})
		}
	}
	if len(uuids) > 0 {
		e.Env = append(e.Env, "CUDA_VISIBLE_DEVICES="+strings.Join(uuids, ","))
	}
}

// LostMIG is a prepared claim whose MIG instance is gone (destroyed under
// its pods).
type LostMIG struct {
	UID, Namespace, Name string
	Device, UUID         string
}

// LostMIGs lists the prepared claims whose MIG instance NVML no longer has.
func (d *Driver) LostMIGs() ([]LostMIG, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg.MIG == nil {
		return nil, nil
	}
	have := map[string]map[string]bool{} // MIG UUIDs by parent UUID
	var out []LostMIG
	for uid, c := range d.ck.Claims {
		if c.State != checkpoint.PrepareCompleted {
			continue
		}
		for _, dev := range c.Devices {
			r := dev.MIG
			if r == nil {
				continue
			}
			if have[r.ParentUUID] == nil {
				have[r.ParentUUID] = map[string]bool{}
				index, ok, err := d.parentOf(r)
				if err != nil {
					return nil, err
				}
				var ins []gpu.MIGInstance
				if ok { // a GPU gone has no instances
					if ins, err = d.cfg.MIG.MIGInstances(index); err != nil {
						return nil, fmt.Errorf("MIG instances of GPU %d (%s): %w", index, r.ParentUUID, err)
					}
				}
				for _, in := range ins {
					have[r.ParentUUID][in.UUID] = true
				}
			}
			if !have[r.ParentUUID][r.UUID] {
				out = append(out, LostMIG{UID: uid, Namespace: c.Namespace, Name: c.Name, Device: dev.Device, UUID: r.UUID})
			}
		}
	}
	return out, nil
}
