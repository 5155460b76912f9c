// Package dra is the gpuslice.io DRA driver of the node agent: it prepares
// and unprepares the ResourceClaims the kubelet hands it (through the
// kubeletplugin helper of k8s.io/dynamic-resource-allocation). A prepared
// claim is one group (all containers and pods sharing the claim are its
// members) made through the groups manager with the claim's consumed
// capacity as its memory limit and share of GPU time and its GPUShareConfig
// for the rest, one CDI spec (internal/gpucdi ClaimSpec), and one entry in
// the checkpoint (internal/dra/checkpoint) that records each step, so that a
// restarted driver finishes or undoes whatever a crash left half done.
package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
)

// DriverName is the DRA driver's name (and the domain of its attributes).
const DriverName = "gpuslice.io"

// groupPrefix starts the name of every group the driver makes (GroupName).
const groupPrefix = "dra-"

// Groups is what the driver needs of the groups manager (internal/groupmgr).
type Groups interface {
	Create(ctx context.Context, name string, r groupmgr.Resources, o groupmgr.CreateOptions) error
	Set(ctx context.Context, name string, r groupmgr.Resources) error
	Remove(ctx context.Context, name string) error
	List() ([]string, error)
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
	// MIG makes and destroys the MIG instances of devices that are (GPU.MIG);
	// nil where the node offers none. MIGMinors is the driver's table of
	// MIG access nodes (MIGMinorsFile).
	MIG       MIG
	MIGMinors string
	// Observer counts MIG instances made and destroyed (nil: none).
	Observer MIGObserver
	// Fault, for tests only (nil in the node agent, which has no way to set
	// it), is called at each Step once it is done: an error fails the step
	// as if it had failed; a test may also end the process there.
	Fault func(Step) error
}

// Step is a point of Prepare or Unprepare, reached once what it names is
// done (and, for the checkpoint steps, saved).
type Step string

// The steps, in order. A crash after any of them leaves the checkpoint
// saying what to finish or undo.
const (
	StepPrepareStarted     Step = "prepare-started"     // PrepareStarted saved, nothing made
	StepGroupCreated       Step = "group-created"       // the group made and applied by the daemon
	StepSpecWritten        Step = "cdi-spec-written"    // the CDI spec written
	StepPrepareCompleted   Step = "prepare-completed"   // PrepareCompleted saved, the kubelet not answered
	StepUnprepareStarted   Step = "unprepare-started"   // UnprepareStarted saved, nothing removed
	StepSpecRemoved        Step = "cdi-spec-removed"    // the CDI spec removed
	StepGroupRemoved       Step = "group-removed"       // the group removed
	StepUnprepareCompleted Step = "unprepare-completed" // the entry removed and saved, the kubelet not answered
)

// CrashAtEnv names the step at which an agent built with the
// gpuslice_faultinject tag kills its own process (SIGKILL: no cleanup of any
// kind; faultinject.go); only the node end-to-end test builds it so. The
// release build ignores the variable (faultinject_off.go).
const CrashAtEnv = "GPUSLICE_TEST_DRA_CRASH_AT"

// Steps lists every step, Prepare's then Unprepare's.
func Steps() []Step {
	return []Step{StepPrepareStarted, StepGroupCreated, StepSpecWritten, StepPrepareCompleted,
		StepUnprepareStarted, StepSpecRemoved, StepGroupRemoved, StepUnprepareCompleted}
}

// Driver prepares and unprepares claims. Safe for concurrent use (calls are
// serialized: the kubeletplugin helper serializes them too).
type Driver struct {
	cfg Config
	mu  sync.Mutex
	ck  checkpoint.Data
}

// New returns a driver with the claims of its checkpoint (a corrupt
// checkpoint is an error: the agent must not forget claims silently), after
// recovering: a claim a crash left PrepareStarted is undone (the kubelet got
// no answer and asks again), one left UnprepareStarted is removed, and a
// group or CDI spec of the driver that no checkpoint entry owns (made by an
// agent before the steps were recorded) is removed. What cannot be removed
// now (a group still in use) is logged and left to the claim's next call.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	ck, err := checkpoint.Load(cfg.Checkpoint)
	if err != nil {
		return nil, err
	}
	cfg.Inject.CDIKind = ""
	d := &Driver{cfg: cfg, ck: ck}
	d.recover(ctx)
	return d, nil
}

// recover finishes or undoes the half-done claims and removes what no claim owns.
func (d *Driver) recover(ctx context.Context) {
	log := klog.FromContext(ctx)
	uids := make([]string, 0, len(d.ck.Claims))
	for uid := range d.ck.Claims {
		uids = append(uids, uid)
	}
	slices.Sort(uids)
	for _, uid := range uids {
		c := d.ck.Claims[uid]
		if c.State == checkpoint.PrepareCompleted {
			continue
		}
		err := d.remove(ctx, uid, c)
		log.Info("DRA claim left half done by an earlier agent", "claim", c.Namespace+"/"+c.Name, "uid", uid,
			"state", c.State, "removed", err == nil, "err", err)
	}
	groups, err := d.cfg.Groups.List()
	if err != nil {
		log.Error(err, "DRA: groups not listed; groups no claim owns are not looked for")
	}
	for _, g := range groups {
		uid, ok := strings.CutPrefix(g, groupPrefix)
		if _, owned := d.ck.Claims[uid]; ok && !owned {
			err := d.cfg.Groups.Remove(ctx, g)
			log.Info("DRA group no claim owns", "group", g, "removed", err == nil, "err", err)
		}
	}
	specs, err := gpucdi.ClaimSpecs(d.cfg.CDIDir)
	if err != nil {
		log.Error(err, "DRA: CDI specs not listed; specs no claim owns are not looked for")
	}
	for _, uid := range specs {
		if _, owned := d.ck.Claims[uid]; !owned {
			err := gpucdi.RemoveClaim(d.cfg.CDIDir, uid)
			log.Info("DRA CDI spec no claim owns", "uid", uid, "removed", err == nil, "err", err)
		}
	}
}

// GroupName is the group of a claim.
func GroupName(uid types.UID) string { return groupPrefix + string(uid) }

// Prepared returns the claims of the checkpoint (a copy), whatever their state.
func (d *Driver) Prepared() map[string]checkpoint.Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]checkpoint.Claim, len(d.ck.Claims))
	for k, v := range d.ck.Claims {
		out[k] = v
	}
	return out
}

// fault reports step to Config.Fault (tests).
func (d *Driver) fault(s Step) error {
	if d.cfg.Fault == nil {
		return nil
	}
	if err := d.cfg.Fault(s); err != nil {
		return fmt.Errorf("fault at %s: %w", s, err)
	}
	return nil
}

// save records claim uid as c (deleted: c nil) in the checkpoint file; on
// failure the checkpoint in memory is left as it was.
func (d *Driver) save(uid string, c *checkpoint.Claim) error {
	old, had := d.ck.Claims[uid]
	if c == nil {
		delete(d.ck.Claims, uid)
	} else {
		d.ck.Claims[uid] = *c
	}
	err := checkpoint.Save(d.cfg.Checkpoint, d.ck)
	if err != nil {
		if had {
			d.ck.Claims[uid] = old
		} else {
			delete(d.ck.Claims, uid)
		}
	}
	return err
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
