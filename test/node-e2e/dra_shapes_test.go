//go:build nodee2e

package nodee2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// The claim shapes run on GPU 1 (free before the taint test); every pod and
// claim of them is gone again at the end, so the later subtests see the
// node as before.
const shapesGPU = 1

// testDRAShapes: a claim shared by two pods is one group with both pods'
// processes in it (limited together); two claims in two containers of one
// pod are two groups, each container limited by its own; two claims on two
// GPUs in one container are two groups, each GPU limited and gated by its
// claim's, and two claims on one GPU in one container are refused; a firstAvailable
// request gets its second subrequest, and a config naming the request
// applies to it; an admin-access claim gets the GPU with no group or limit;
// each prepared device's status carries its UUID and health.
func testDRAShapes(t *testing.T, ctx context.Context, n *node) {
	n.testSharedClaim(ctx)
	n.testTwoContainers(ctx)
	n.testTwoClaimsOneContainer(ctx)
	n.testTwoClaimsOneGPU(ctx)
	n.testFirstAvailable(ctx)
	n.testAdminAccess(ctx)
}

const mib = int64(1) << 20

// testSharedClaim: pods shared-a (holding 384 MiB) and shared-b (asking
// for 256 MiB more) on one claim of 512 MiB: one group, the second
// allocation refused by the group's limit, memory.current the first's.
func (n *node) testSharedClaim(ctx context.Context) {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}, Spec: draClaim(20, 512*mib, shapesGPU, "")}
	c, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	hold := func(name string, bytes int64) *corev1.Pod {
		p := draPod(name, "unused", "/gs/gs-memfill", "--chunk", fmt.Sprint(bytes), "--max", fmt.Sprint(bytes), "--hold-ms", "3600000")
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: harness.DRARequest, ResourceClaimName: ptr.To(c.Name)}}
		return n.createPod(ctx, p)
	}
	a := n.waitPod(bounded(ctx), hold("shared-a", 384*mib).Name, "running", running)
	grp := "dra-" + string(c.UID)
	n.waitGroupCurrent(bounded(ctx), grp, uint64(384*mib))
	b := n.waitPod(bounded(ctx), hold("shared-b", 256*mib).Name, "running", running)
	rep, reason := n.memfillReport(bounded(ctx), b)
	if rep.Allocated != 0 || rep.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || rep.Total != uint64(512*mib) {
		n.t.Errorf("shared-b beside shared-a on one 512 MiB claim: %+v, want total 512 MiB, nothing allocated, stopped by CUDA_ERROR_OUT_OF_MEMORY", rep)
	}
	if !strings.Contains(reason, fmt.Sprintf("group %q uses 384.0 MiB of its 512.0 MiB limit", grp)) {
		n.t.Errorf("shared-b's refusal does not name the shared group's use: %q", reason)
	}
	if got := n.groupFile(grp, group.FileMemoryCurrent); got != fmt.Sprint(384*mib) {
		n.t.Errorf("shared group memory.current %s after shared-b's refusal, want shared-a's %d", got, 384*mib)
	}
	if groups := n.draGroups(); len(groups) != 3 { // s25, s75, shared, and no other
		n.t.Errorf("groups on the node with the shared claim prepared for two pods: %v", groups)
	}
	cur, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil || len(cur.Status.ReservedFor) != 2 {
		n.t.Errorf("shared claim reserved for %v (%v), want both pods", cur.Status.ReservedFor, err)
	}
	n.checkDeviceStatus(ctx, c.Name, false)
	n.t.Logf("e2e dra shapes: claim shared by %s and %s is group %s; %s", a.Name, b.Name, grp, reason)
	n.deletePods(ctx, a.Name, b.Name)
	n.waitUnprepared(bounded(ctx), c)
	if err := n.cp.Client.ResourceV1().ResourceClaims(ns).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// waitGroupCurrent waits until group name's memory.current is want.
func (n *node) waitGroupCurrent(ctx context.Context, name string, want uint64) {
	var got string
	if err := waitFor(ctx, func() bool { got = n.groupFile(name, group.FileMemoryCurrent); return got == fmt.Sprint(want) }); err != nil {
		n.t.Fatalf("group %s memory.current %s, want %d: %v\nagent log:\n%s", name, got, want, err, n.agentTail())
	}
}

// draGroups lists the node's DRA groups.
func (n *node) draGroups() []string {
	var out []string
	for _, uid := range n.groupUIDs() {
		out = append(out, "dra-"+uid)
	}
	return out
}

// testTwoContainers: a pod whose containers a and b use claims of 256 and
// 384 MiB: two groups, and a new CUDA process in each container sees its own
// claim's memory.
func (n *node) testTwoContainers(ctx context.Context) {
	n.claimTemplate(ctx, "two-a", 10, 256*mib, shapesGPU, "")
	n.claimTemplate(ctx, "two-b", 15, 384*mib, shapesGPU, "")
	p := draPod("two", "two-a", "/bin/busybox", "sleep", "3600")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: ptr.To("two-a")},
		{Name: "b", ResourceClaimTemplateName: ptr.To("two-b")}}
	ca := p.Spec.Containers[0]
	ca.Name, ca.Resources.Claims = "a", []corev1.ResourceClaim{{Name: "a"}}
	cb := *ca.DeepCopy()
	cb.Name, cb.Resources.Claims = "b", []corev1.ResourceClaim{{Name: "b"}}
	p.Spec.Containers = []corev1.Container{ca, cb}
	p = n.waitPod(bounded(ctx), n.createPod(ctx, p).Name, "running", running)
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, s := range p.Status.ResourceClaimStatuses {
		c, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, ptr.Deref(s.ResourceClaimName, ""), metav1.GetOptions{})
		if err != nil {
			n.t.Fatal(err)
		}
		claims[s.Name] = c
	}
	if len(claims) != 2 || claims["a"].UID == claims["b"].UID {
		n.t.Fatalf("pod two's claims: %v", p.Status.ResourceClaimStatuses)
	}
	for name, want := range map[string]int64{"a": 256 * mib, "b": 384 * mib} {
		if g, _, _ := n.claimOnNode(string(claims[name].UID)); !g {
			n.t.Errorf("container %s's claim has no group", name)
		}
		if got := n.memoryTotalIn(p, name); got != want {
			n.t.Errorf("container %s: a CUDA process sees %d bytes, want its claim's %d", name, got, want)
		}
	}
	n.t.Logf("e2e dra shapes: two containers, two claims: groups dra-%s and dra-%s", claims["a"].UID, claims["b"].UID)
	n.deletePods(ctx, p.Name)
	n.waitUnprepared(bounded(ctx), claims["a"])
	n.waitUnprepared(bounded(ctx), claims["b"])
}

// testTwoClaimsOneContainer: one container naming two claims on two GPUs
// (256 MiB of GPU 1, 384 MiB of GPU 2) is two groups, both enforced: a CUDA
// process on each GPU sees its claim's memory, is refused past its claim's
// limit (naming that claim's group) while the other GPU takes more than that,
// and its launches are gated as that claim's group on that GPU.
func (n *node) testTwoClaimsOneContainer(ctx context.Context) {
	n.claimTemplate(ctx, "two-c", 15, 384*mib, shapesGPU+1, "")
	p := draPod("two-in-one", "two-a", "/bin/busybox", "sleep", "3600")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: ptr.To("two-a")},
		{Name: "b", ResourceClaimTemplateName: ptr.To("two-c")}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "a"}, {Name: "b"}}
	p = n.waitPod(bounded(ctx), n.createPod(ctx, p).Name, "running", running)
	claims := n.podClaims(ctx, p)
	if len(claims) != 2 || claims["a"].UID == claims["b"].UID {
		n.t.Fatalf("pod two-in-one's claims: %v", p.Status.ResourceClaimStatuses)
	}
	// CUDA ordinal 0 is GPU 1 (claim a), ordinal 1 GPU 2 (claim b): the
	// container's GPUs in index order.
	for i, c := range []struct {
		name        string
		limit, over int64 // over: more than the other claim's limit, within this one's
	}{{"a", 256 * mib, 0}, {"b", 384 * mib, 300 * mib}} {
		grp := "dra-" + string(claims[c.name].UID)
		if g, _, _ := n.claimOnNode(string(claims[c.name].UID)); !g {
			n.t.Fatalf("claim %s has no group", c.name)
		}
		if got := n.memoryTotalDevice(p, i); got != c.limit {
			n.t.Errorf("CUDA device %d (claim %s): a process sees %d bytes, want its claim's %d", i, c.name, got, c.limit)
		}
		if c.over > 0 {
			if rep, _ := n.memfillDevice(p, i, c.over); rep.Allocated != uint64(c.over) {
				n.t.Errorf("CUDA device %d (claim %s): %d bytes allocated of %d (past the other claim's limit, within this one's): %+v",
					i, c.name, rep.Allocated, c.over, rep)
			}
		}
		rep, reason := n.memfillDevice(p, i, c.limit+64*mib)
		want := fmt.Sprintf("group %q uses", grp)
		if rep.Allocated != 0 || rep.StoppedBy != "CUDA_ERROR_OUT_OF_MEMORY" || !strings.Contains(reason, want) ||
			!strings.Contains(reason, fmt.Sprintf("of its %d.0 MiB limit", c.limit/mib)) {
			n.t.Errorf("CUDA device %d (claim %s) past its limit: %+v, %q; want refused by %s's %d MiB", i, c.name, rep, reason,
				grp, c.limit/mib)
		}
	}
	n.checkGatedPerGPU(ctx, p, claims)
	n.t.Logf("e2e dra shapes: two claims in one container: groups dra-%s (GPU %d) and dra-%s (GPU %d), both enforced",
		claims["a"].UID, shapesGPU, claims["b"].UID, shapesGPU+1)
	n.deletePods(ctx, p.Name)
	n.waitUnprepared(bounded(ctx), claims["a"])
	n.waitUnprepared(bounded(ctx), claims["b"])
}

// testTwoClaimsOneGPU: one container naming two claims on one GPU (two
// shares of it, which would be one group there) is refused at Prepare with an
// event naming both and the GPU, and nothing of either is prepared.
func (n *node) testTwoClaimsOneGPU(ctx context.Context) {
	p := draPod("two-on-one", "two-a", "/bin/busybox", "sleep", "3600")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimTemplateName: ptr.To("two-a")},
		{Name: "b", ResourceClaimTemplateName: ptr.To("two-b")}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "a"}, {Name: "b"}}
	p = n.createPod(ctx, p)
	var msg string
	if err := waitFor(ctx, func() bool { msg = n.podEvent(ctx, p.Name, "are on one GPU"); return msg != "" }); err != nil {
		n.t.Fatalf("no event refusing pod two-on-one's two claims on one GPU: %v\nagent log:\n%s", err, n.agentTail())
	}
	n.t.Logf("e2e dra shapes: two claims on one GPU in one container: %s", msg)
	cur, err := n.cp.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	for name, c := range n.podClaims(ctx, cur) {
		if g, spec, saved := n.claimOnNode(string(c.UID)); g || spec || saved {
			n.t.Errorf("refused claim %s on the node: group %v, CDI spec %v, checkpoint entry %v", name, g, spec, saved)
		}
	}
	if cur.Status.Phase == corev1.PodRunning {
		n.t.Errorf("pod two-on-one runs")
	}
	n.deletePods(ctx, p.Name)
}

// podClaims is the pod's claims by the pod's names for them.
func (n *node) podClaims(ctx context.Context, p *corev1.Pod) map[string]*resourceapi.ResourceClaim {
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, s := range p.Status.ResourceClaimStatuses {
		c, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, ptr.Deref(s.ResourceClaimName, ""), metav1.GetOptions{})
		if err != nil {
			n.t.Fatal(err)
		}
		claims[s.Name] = c
	}
	return claims
}

// checkGatedPerGPU: kernels launched on each CUDA device of the container at
// once are gated by the time-slice daemon as the group of the claim that
// brought that GPU (a member of it, granted time, on that GPU), not as the
// container's other group.
func (n *node) checkGatedPerGPU(ctx context.Context, p *corev1.Pod, claims map[string]*resourceapi.ResourceClaim) {
	uuids := n.claimUUIDs(claims["a"], claims["b"])
	done := make(chan error, 2)
	for i := range 2 {
		go func() {
			report := fmt.Sprintf("/tmp/gs-tenant-%d.out", i)
			_, err := n.execReportIn(p, p.Status.ContainerStatuses[0].Name, report, "/bin/sh", "-c",
				fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d exec /gs/gs-tenant --mode busy --kernel-us 500 --seconds 4 >%s 2>&1", i, report))
			done <- err
		}()
	}
	var status string
	err := waitFor(ctx, func() bool {
		ok := true
		for i, c := range []*resourceapi.ResourceClaim{claims["a"], claims["b"]} {
			g, found, raw := n.daemonGroup(uuids[i], "dra-"+string(c.UID))
			status = raw
			ok = ok && found && g.Members >= 1 && g.Grants > 0
		}
		return ok
	})
	for range 2 {
		if e := <-done; e != nil {
			n.t.Errorf("gs-tenant in two-in-one: %v", e)
		}
	}
	if err != nil {
		n.t.Fatalf("launches on GPUs %v not gated as claims a and b's groups (dra-%s, dra-%s): %v\ndaemon status: %s\nagent log:\n%s",
			uuids, claims["a"].UID, claims["b"].UID, err, status, n.agentTail())
	}
	for i, c := range []*resourceapi.ResourceClaim{claims["b"], claims["a"]} { // each group on the other's GPU: none
		if g, found, _ := n.daemonGroup(uuids[i], "dra-"+string(c.UID)); found && g.Grants > 0 {
			n.t.Errorf("group dra-%s was granted time on GPU %s, which its claim does not hold: %+v", c.UID, uuids[i], g)
		}
	}
}

// claimUUIDs is the GPU UUID each prepared claim holds (one each), from the
// driver's checkpoint.
func (n *node) claimUUIDs(cs ...*resourceapi.ResourceClaim) []string {
	cp, err := checkpoint.Load(draCheckpoint)
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		e, ok := cp.Claims[string(c.UID)]
		if !ok || len(e.Devices) != 1 {
			n.t.Fatalf("claim %s in the checkpoint: %+v", c.Name, e)
		}
		out = append(out, e.Devices[0].UUID)
	}
	return out
}

// memoryTotalDevice is the GPU memory a new CUDA process in the pod's first
// container sees on its CUDA device dev.
func (n *node) memoryTotalDevice(p *corev1.Pod, dev int) int64 {
	n.execs++
	report := fmt.Sprintf("/tmp/gs-nvmlprocs-%d.out", n.execs)
	out, err := n.execReport(p, report, "/bin/sh", "-c",
		fmt.Sprintf("CUDA_VISIBLE_DEVICES=%d exec /gs/gs-nvmlprocs >%s 2>&1", dev, report))
	var rep struct {
		Total int64 `json:"total"`
	}
	if err == nil {
		err = jsonUnmarshal(out, &rep)
	}
	if err != nil {
		n.t.Fatalf("gs-nvmlprocs on device %d in %s: %v; it wrote %q\nagent log:\n%s", dev, p.Name, err, out, n.agentTail())
	}
	return rep.Total
}

// memfillDevice allocates bytes at once on CUDA device dev of the pod's first
// container (a new process, gs-memfill) and returns its report and the
// library's line ("gpuslice: ...", "" for none).
func (n *node) memfillDevice(p *corev1.Pod, dev int, bytes int64) (memfillResult, string) {
	n.execs++
	report := fmt.Sprintf("/tmp/gs-memfill-%d.out", n.execs)
	out, err := n.execReport(p, report, "/bin/sh", "-c", fmt.Sprintf(
		"CUDA_VISIBLE_DEVICES=%d exec /gs/gs-memfill --chunk %d --max %d --hold-ms 0 >%s 2>&1", dev, bytes, bytes, report))
	var r memfillResult
	var reason string
	found := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "gpuslice: ") {
			reason = line
		}
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &r) == nil {
			found = true
		}
	}
	if err != nil || !found {
		n.t.Fatalf("gs-memfill on device %d in %s: %v; it wrote %q\nagent log:\n%s", dev, p.Name, err, out, n.agentTail())
	}
	return r, reason
}

// testFirstAvailable: a request whose first subrequest (200 units) no GPU
// has gets its second (5 units, 256 MiB), and a high-priority config naming
// the request applies to it.
func (n *node) testFirstAvailable(ctx context.Context) {
	sub := func(name string, units int64) resourceapi.DeviceSubRequest {
		r := draClaim(units, 256*mib, shapesGPU, "").Devices.Requests[0].Exactly
		return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: r.DeviceClassName, Selectors: r.Selectors,
			AllocationMode: r.AllocationMode, Count: r.Count, Capacity: r.Capacity}
	}
	spec := draClaim(5, 256*mib, shapesGPU, `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig","priority":"high"}`)
	spec.Devices.Config[0].Requests = []string{harness.DRARequest}
	spec.Devices.Requests[0].Exactly = nil
	spec.Devices.Requests[0].FirstAvailable = []resourceapi.DeviceSubRequest{sub("huge", 200), sub("small", 5)}
	n.createTemplate(ctx, "first", spec)
	p := n.waitPod(bounded(ctx), n.createPod(ctx, draPod("first", "first", "/bin/busybox", "sleep", "3600")).Name, "running", running)
	c := n.claimOf(ctx, p)
	if r := c.Status.Allocation.Devices.Results[0].Request; r != harness.DRARequest+"/small" {
		n.t.Errorf("firstAvailable claim allocated for %q, want %s/small", r, harness.DRARequest)
	}
	res, err := groupmgrGet(n, "dra-"+string(c.UID))
	if err != nil || res.Share != 0.05 || res.MemoryMax != uint64(256*mib) || res.Priority.String() != "high" {
		n.t.Errorf("firstAvailable claim's group: %+v (%v), want share 0.05, 256 MiB, priority high", res, err)
	}
	if got := n.memoryTotal(p); got != 256*mib {
		n.t.Errorf("firstAvailable pod sees %d bytes, want 256 MiB", got)
	}
	n.deletePods(ctx, p.Name)
	n.waitUnprepared(bounded(ctx), c)
}

// testAdminAccess: an admin-access claim for GPU 1 (in a namespace labelled
// for it) gets the GPU with no group and no limit (a CUDA process sees all
// its memory), marked so in the claim's device status.
func (n *node) testAdminAccess(ctx context.Context) {
	patch := []byte(`{"metadata":{"labels":{"resource.kubernetes.io/admin-access":"true"}}}`)
	if _, err := n.cp.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		n.t.Fatal(err)
	}
	spec := harness.DRAClaimSpec(harness.GPURequest{GPUs: 1})
	spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	spec.Devices.Requests[0].Exactly.Selectors = draClaim(1, 0, shapesGPU, "").Devices.Requests[0].Exactly.Selectors
	n.createTemplate(ctx, "admin", spec)
	p := n.waitPod(bounded(ctx), n.createPod(ctx, draPod("admin", "admin", "/bin/busybox", "sleep", "3600")).Name, "running", running)
	c := n.claimOf(ctx, p)
	if g, s, saved := n.claimOnNode(string(c.UID)); g || !s || !saved {
		n.t.Errorf("admin-access claim on the node: group %v (want none), CDI spec %v, checkpoint entry %v", g, s, saved)
	}
	if got, want := n.memoryTotal(p), int64(n.gpus[shapesGPU].MemoryTotal); got != want {
		n.t.Errorf("admin-access pod sees %d bytes, want the whole GPU's %d", got, want)
	}
	n.checkDeviceStatus(ctx, c.Name, true)
	n.deletePods(ctx, p.Name)
	n.waitUnprepared(bounded(ctx), c)
}

// checkDeviceStatus waits until the claim's status.devices has the
// driver's entry for each allocated device: Ready, the GPU's UUID, Healthy,
// admin access as said.
func (n *node) checkDeviceStatus(ctx context.Context, claim string, admin bool) {
	var c *resourceapi.ResourceClaim
	var problem string
	err := waitFor(ctx, func() bool {
		cur, err := n.cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			problem = err.Error()
			return false
		}
		c, problem = cur, ""
		if len(c.Status.Devices) != len(c.Status.Allocation.Devices.Results) {
			problem = fmt.Sprintf("%d device statuses for %d devices", len(c.Status.Devices), len(c.Status.Allocation.Devices.Results))
			return false
		}
		for _, d := range c.Status.Devices {
			var st drav1.DeviceStatus
			if d.Data == nil || json.Unmarshal(d.Data.Raw, &st) != nil {
				problem = "no DeviceStatus data"
				return false
			}
			idx := strings.TrimPrefix(d.Device, "gpu-")
			want := ""
			for _, g := range n.gpus {
				if fmt.Sprint(g.Index) == idx {
					want = g.UUID
				}
			}
			if d.Driver != harness.DRADriver || st.Kind != drav1.DeviceStatusKind || !strings.EqualFold(st.UUID, want) ||
				st.Health != drav1.HealthHealthy || st.AdminAccess != admin || len(d.Conditions) != 1 || d.Conditions[0].Type != "Ready" {
				problem = fmt.Sprintf("device %s status %+v data %+v (want UUID %s, admin access %v)", d.Device, d, st, want, admin)
				return false
			}
		}
		return true
	})
	if err != nil {
		n.t.Errorf("claim %s's device status: %s: %v", claim, problem, err)
		return
	}
	n.t.Logf("e2e dra shapes: claim %s device status %s", claim, c.Status.Devices[0].Data.Raw)
}

// groupUIDs are the claim UIDs of the node's DRA groups.
func (n *node) groupUIDs() []string {
	var out []string
	ents, _ := os.ReadDir(filepath.Join(n.runDir(), "groups"))
	for _, e := range ents {
		if uid, ok := strings.CutPrefix(e.Name(), "dra-"); ok {
			out = append(out, uid)
		}
	}
	return out
}

// groupmgrGet reads a group's resources as the groups manager does.
func groupmgrGet(n *node, name string) (groupmgr.Resources, error) {
	return groupmgr.New(groupmgr.Config{RunDir: n.runDir()}).Get(name)
}
