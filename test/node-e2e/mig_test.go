//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/dra/devices"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/proto"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// The MIG node: one simulated H100 80GB in MIG mode (the simulator's real
// NVML MIG API), offered as 18 MIG devices (6 profiles, their placements).
const migDevices = 18

func migNode(n *node) {
	n.simEnv = map[string]string{"GPUSLICE_SIM_GPUS": "1", "GPUSLICE_SIM_MEMORY": "80GiB", "GPUSLICE_SIM_SMS": "132",
		"GPUSLICE_SIM_NAME": "NVIDIA H100 80GB HBM3", "GPUSLICE_SIM_MIG": "on"}
	n.sliceDevices = migDevices
	n.extraAgentFlags = []string{"--health-period", "1s"} // the lost-instance check's period
}

// migResult is what TestMIG measured for its summary line.
type migResult struct {
	made        int
	shares      []float64
	held, tried int
	toRunning   []time.Duration
}

// TestMIG (make e2e-mig): MIG instances made on demand through DRA
// partitionable devices, placed by the stock scheduler, on the real
// kubelet: two pods each get a 3g.40gb instance; one instance destroyed
// under its (idle) pod is reported; deleting the pods destroys what was
// made for them; two claims of 25 and 75 units share one 1g.20gb instance
// with their memory limits and time shares; a profile that does not fit is
// left Pending. Ends with "mig: <n> instances made by claims, shares inside
// one instance <a>% / <b>%, memory limits held <h>/<n>, claim to running
// p99 <ms> ms".
func TestMIG(t *testing.T) {
	ctx, n, ok := privateDRANode(t, "TestMIG", migNode)
	if !ok {
		return
	}
	defer n.stop()
	n.migClasses(ctx, "3g.40gb", "1g.20gb", "7g.80gb")
	var r migResult
	if !t.Run("on-demand", func(t *testing.T) { n.t = t; testMIGOnDemand(t, ctx, n, &r) }) {
		return
	}
	shared := t.Run("shares", func(t *testing.T) { n.t = t; testMIGShares(t, ctx, n, &r) })
	n.t = t
	if !shared {
		return
	}
	slices.Sort(r.toRunning)
	line := fmt.Sprintf("mig: %d instances made by claims, shares inside one instance %.1f%% / %.1f%%, memory limits held %d/%d, claim to running p99 %d ms",
		r.made, r.shares[0], r.shares[1], r.held, r.tried, p99(r.toRunning).Milliseconds())
	fmt.Println(line)
	if path := os.Getenv(draSummary); path != "" {
		if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// migClasses creates mig-<profile>.gpuslice.io for each profile, as the chart does.
func (n *node) migClasses(ctx context.Context, profiles ...string) {
	for _, p := range profiles {
		dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: devices.ClassMIGProfile(p)},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.driver == %q && has(device.attributes[%q].migProfile) && device.attributes[%q].migProfile == %q`,
					harness.DRADriver, harness.DRADriver, harness.DRADriver, p)}}}}}
		if _, err := n.cp.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			n.t.Fatal(err)
		}
	}
}

// migTemplate is a template of one instance of profile: units and memory
// of it (0, 0: all of it), at placement (-1: any).
func (n *node) migTemplate(ctx context.Context, name, profile string, units, memory int64, placement int) {
	spec := harness.DRAClaimSpec(harness.GPURequest{Units: units, Memory: memory, GPUs: map[bool]int64{true: 1}[units == 0]})
	req := spec.Devices.Requests[0].Exactly
	req.DeviceClassName = devices.ClassMIGProfile(profile)
	if placement >= 0 {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].migPlacement == %d", harness.DRADriver, placement)}}}
	}
	n.createTemplate(ctx, name, spec)
}

// runPods creates the pods and waits until each runs, recording each one's
// time from creation to running.
func (n *node) runPods(ctx context.Context, r *migResult, pods ...*corev1.Pod) []*corev1.Pod {
	start := make([]time.Time, len(pods))
	for i, p := range pods {
		start[i] = time.Now()
		pods[i] = n.createPod(ctx, p)
	}
	for i, p := range pods {
		pods[i] = n.waitPod(bounded(ctx), p.Name, "running", running)
		r.toRunning = append(r.toRunning, time.Since(start[i]))
	}
	return pods
}

// migInstances lists GPU 0's MIG instances as the driver (the simulator's
// NVML, as root) has them.
func (n *node) migInstances() []gpu.MIGInstance {
	drv, err := gpu.OpenDriver(gpu.ModeSim, filepath.Join(n.bin, "sim"))
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = drv.NVML.Shutdown() }()
	m, ok := drv.NVML.(gpu.MIG)
	if !ok {
		n.t.Fatal("NVML has no MIG calls")
	}
	ins, err := m.MIGInstances(0)
	if err != nil {
		n.t.Fatal(err)
	}
	return ins
}

// waitInstances waits until GPU 0 holds want instances.
func (n *node) waitInstances(ctx context.Context, want int) []gpu.MIGInstance {
	var ins []gpu.MIGInstance
	if err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		ins = n.migInstances()
		return len(ins) == want, nil
	}); err != nil {
		n.t.Fatalf("GPU 0 holds %d MIG instances %+v, want %d: %v\nagent log:\n%s", len(ins), ins, want, err, n.agentTail())
	}
	return ins
}

// visibleOf is the MIG instance the claim's CDI spec names in CUDA_VISIBLE_DEVICES.
func (n *node) visibleOf(c *resourceapi.ResourceClaim) string {
	b, err := os.ReadFile(filepath.Join(n.cdiDir, harness.DRADriver+"-claim_"+string(c.UID)+".json"))
	if err != nil {
		n.t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "CUDA_VISIBLE_DEVICES=")
	if !ok {
		n.t.Fatalf("claim %s's CDI spec sets no CUDA_VISIBLE_DEVICES: %s", c.Name, b)
	}
	return strings.SplitN(after, `"`, 2)[0]
}

// testMIGOnDemand: two pods of 3g.40gb claims run, each on an instance made
// for it (CUDA_VISIBLE_DEVICES=MIG-<uuid> of an instance NVML lists); one
// instance destroyed under its idle pod is reported on the claim and the
// pod; deleting both pods destroys what was made and leaves nothing of the
// claims.
func testMIGOnDemand(t *testing.T, ctx context.Context, n *node, r *migResult) {
	if ins := n.migInstances(); len(ins) != 0 {
		t.Fatalf("GPU 0 holds instances before any claim: %+v", ins)
	}
	n.migTemplate(ctx, "mig3g", "3g.40gb", 0, 0, -1)
	pods := n.runPods(ctx, r, draPod("m3a", "mig3g", "/bin/busybox", "sleep", "3600"), draPod("m3b", "mig3g", "/bin/busybox", "sleep", "3600"))
	ins := n.waitInstances(bounded(ctx), 2)
	r.made += 2
	var claims []*resourceapi.ResourceClaim
	seen := map[string]bool{}
	for _, p := range pods {
		c := n.claimOf(ctx, p)
		claims = append(claims, c)
		v := n.visibleOf(c)
		if !strings.HasPrefix(allocatedDevice(c), "gpu-0-mig-3g-40gb-") || seen[v] ||
			!slices.ContainsFunc(ins, func(in gpu.MIGInstance) bool { return in.UUID == v }) {
			t.Fatalf("pod %s: device %s, CUDA_VISIBLE_DEVICES=%s; instances %+v", p.Name, allocatedDevice(c), v, ins)
		}
		seen[v] = true
	}
	t.Logf("e2e mig: two 3g.40gb instances made on demand: %v", seen)
	// Destroyed under its idle pod (no process on it): reported.
	lost := n.visibleOf(claims[0])
	for _, in := range ins {
		if in.UUID == lost {
			n.destroyInstance(in.GI)
		}
	}
	t.Logf("e2e mig: lost instance reported on the claim: %q", n.waitEvent(bounded(ctx), claims[0].Name, "MIGInstanceLost"))
	n.waitEvent(bounded(ctx), pods[0].Name, "MIGInstanceLost")
	n.deletePods(ctx, pods[0].Name, pods[1].Name)
	for _, c := range claims {
		n.waitUnprepared(bounded(ctx), c)
	}
	n.waitInstances(bounded(ctx), 0)
}

// destroyInstance destroys GPU instance gi of GPU 0 behind the node's back.
func (n *node) destroyInstance(gi uint32) {
	drv, err := gpu.OpenDriver(gpu.ModeSim, filepath.Join(n.bin, "sim"))
	if err != nil {
		n.t.Fatal(err)
	}
	defer func() { _ = drv.NVML.Shutdown() }()
	if err := drv.NVML.(gpu.MIG).DestroyMIG(0, gi); err != nil {
		n.t.Fatal(err)
	}
}

// testMIGShares: claims of 25 units (4 GiB) and 75 units (8 GiB) of the
// 1g.20gb instance at placement 0 share the one instance made for them:
// shares of the granted time within 5 points, each container's memory
// exactly its claim's; a 7g.80gb claim (its slices held) stays Pending;
// deleting the pods destroys the instance.
func testMIGShares(t *testing.T, ctx context.Context, n *node, r *migResult) {
	n.migTemplate(ctx, "mig1g25", "1g.20gb", 25, 4<<30, 0)
	n.migTemplate(ctx, "mig1g75", "1g.20gb", 75, 8<<30, 0)
	pods := n.runPods(ctx, r, steadyDemand(draPod("m25", "mig1g25", busyTenant()...)), steadyDemand(draPod("m75", "mig1g75", busyTenant()...)))
	ins := n.waitInstances(bounded(ctx), 1)
	r.made++
	var claims []*resourceapi.ResourceClaim
	for _, p := range pods {
		c := n.claimOf(ctx, p)
		claims = append(claims, c)
		if d, v := allocatedDevice(c), n.visibleOf(c); d != "gpu-0-mig-1g-20gb-0" || v != ins[0].UUID {
			t.Fatalf("pod %s: device %s, CUDA_VISIBLE_DEVICES=%s, want gpu-0-mig-1g-20gb-0 and %s", p.Name, d, v, ins[0].UUID)
		}
	}
	n.migTemplate(ctx, "mig7g", "7g.80gb", 0, 0, -1)
	unfit := n.createPod(ctx, draPod("m7", "mig7g", "/bin/busybox", "sleep", "3600"))
	t.Logf("e2e mig unfit: %q", n.pendingForClaims(bounded(ctx), unfit.Name))
	res := n.shares(bounded(ctx), pods, shareWindow)
	n.checkGatedOn(ctx, ins[0].UUID, pods)
	n.checkShares("mig shares", []float64{25, 75}, res)
	r.shares = res.held
	t.Logf("e2e mig shares: granted %.1f%% / %.1f%%, busy %.1f%% / %.1f%%", res.held[0], res.held[1], res.busy[0], res.busy[1])
	var d draResult
	n.checkMemory(pods[0], 4<<30, &d)
	n.checkMemory(pods[1], 8<<30, &d)
	r.held, r.tried = d.held, d.tried
	n.deletePods(ctx, unfit.Name, pods[0].Name, pods[1].Name)
	for _, c := range claims {
		n.waitUnprepared(bounded(ctx), c)
	}
	n.waitInstances(bounded(ctx), 0)
}

// checkGatedOn: the time-slice daemon gates the pods' groups on the MIG
// instance itself (its status has them under the instance's UUID, which it
// spells GPU-<hex>), not on the parent GPU.
func (n *node) checkGatedOn(ctx context.Context, mig string, pods []*corev1.Pod) {
	st, err := n.statusWrittenAfter(ctx, time.Now())
	if err != nil {
		n.t.Fatal(err)
	}
	u, err := proto.ParseUUID(mig)
	if err != nil {
		n.t.Fatal(err)
	}
	var where []string
	for _, g := range st.GPUs {
		for _, gr := range g.Groups {
			for _, p := range pods {
				if gr.Group == n.groupName(p) {
					where = append(where, g.UUID)
				}
			}
		}
	}
	if len(where) != len(pods) || slices.ContainsFunc(where, func(w string) bool { return w != u.String() }) {
		n.t.Fatalf("the pods' groups are gated on %v, want each on the instance %s (%s)", where, mig, u)
	}
}
