//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const (
	teamD = "team-d"
	// draNode is the node of the hand-published ResourceSlice (the
	// driver's own device builder, 4 GPUs of 16 GiB): no such node runs,
	// and the DRA step's pods name no scheduler that runs, so they stay
	// Pending: the step is about what Kueue admits.
	draNode      = "kueue-dra-node"
	noScheduler  = "gpuslice-e2e-none"
	quarterClaim = "quarter"
	overClaim    = "over"
	greedyClaim  = "greedy"
)

// kueueDRAConfig maps gpuslice's DeviceClasses to quota resources in
// Kueue's configuration: whole GPUs (gpu.gpuslice.io) by device count as
// gpuslice.io/gpu, shares (share.gpuslice.io) by the capacity "units" their
// claims consume (KueueDRAIntegrationConsumableCapacity, alpha in v0.19) as
// gpuslice.io/gpu-units, the device plugin's name for the same units.
const kueueDRAConfig = `resources:
  deviceClassMappings:
  - name: gpuslice.io/gpu
    deviceClassNames: [gpu.gpuslice.io]
  - name: gpuslice.io/gpu-units
    deviceClassNames: [share.gpuslice.io]
    sources:
    - capacity: {name: units, driver: gpuslice.io, deviceSelector: {cel: {expression: 'device.driver == "gpuslice.io"'}}}
`

const kueueDRAGates = "KueueDRAIntegrationConsumableCapacity=true"

// draQuota: a team whose ClusterQueue has 100 units and 16 GiB asks for six
// quarter GPUs through a ResourceClaimTemplate (25 units, 4 GiB): Kueue
// counts the claims' units and admits four; a claim of 150 units (more than
// a GPU's request policy allows) is not admitted, with Kueue's reason, and
// one of 25 units and 8 GiB (more memory per unit than the queue's) is
// rejected by gpuslice's check, which keeps the memory quota Kueue does not
// count on this path.
func (k *kueueEnv) draQuota(ctx context.Context) {
	if err := k.cp.CreateDeviceClasses(ctx, false); err != nil {
		k.t.Fatal(err)
	}
	slice, err := harness.DRASlice(draNode, numGPUs, 16*gi)
	if err != nil {
		k.t.Fatal(err)
	}
	if _, err := k.cp.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
	k.apply(soloQueue(teamD, "100", "16Gi"))
	for name, r := range map[string]harness.GPURequest{quarterClaim: {Units: quarter, Memory: 4 * gi},
		overClaim: {Units: 150, Memory: 4 * gi}, greedyClaim: {Units: quarter, Memory: 8 * gi}} {
		spec := harness.DRAClaimSpec(r)
		rct := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: teamD, Name: name},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
		if _, err := k.cp.Client.ResourceV1().ResourceClaimTemplates(teamD).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
			k.t.Fatal(err)
		}
	}
	// Kueue counts the units alone: a claim with more memory per unit than
	// the queue's (16 GiB per 100 units) is rejected by gpuslice's check.
	greedy := draJob("dra-greedy", greedyClaim)
	k.createJob(ctx, greedy)
	msg := k.waitWorkloadSays(ctx, greedy, "allows at most 4Gi with 25 units")
	k.t.Logf("e2e: kueue: DRA Job %s/%s not admitted: %s", greedy.Namespace, greedy.Name, msg)
	for i := range 6 {
		k.createJob(ctx, draJob(fmt.Sprintf("dra-%d", i), quarterClaim))
	}
	over := draJob("dra-over", overClaim)
	k.createJob(ctx, over)
	k.waitDRAAdmitted(ctx, 4)
	msg = k.waitWorkloadSays(ctx, over, "capacity request cannot be satisfied")
	k.t.Logf("e2e: kueue: DRA Job %s/%s not admitted: %s", over.Namespace, over.Name, msg)
	l, err := k.cp.Client.BatchV1().Jobs(teamD).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	for i := range l.Items {
		if j := &l.Items[i]; !jobRunning(j) && j.Name != over.Name && j.Name != greedy.Name {
			msg = k.waitWorkloadSays(ctx, j, "insufficient unused quota for gpuslice.io/gpu-units")
			k.t.Logf("e2e: kueue: DRA Job %s/%s waits: %s", j.Namespace, j.Name, msg)
			break
		}
	}
	fmt.Fprintf(k.walk, "# DRA: claims' units counted\n")
	_, _ = k.run("", "get", "clusterqueue", teamD)
	_, _ = k.run("", "get", "workloads", "-n", teamD)
	k.waitDRAAdmitted(ctx, 4) // still 4 after Kueue said the waiting Job has no quota left
	k.deleteJobs(ctx, teamD, "dra-")
}

// waitDRAAdmitted waits until exactly want of team D's Jobs run (Kueue
// unsuspended them).
func (k *kueueEnv) waitDRAAdmitted(ctx context.Context, want int) {
	var got int
	err := harness.WaitFor(kueueStepCtx(ctx), 200*time.Millisecond, func() (bool, error) {
		l, err := k.cp.Client.BatchV1().Jobs(teamD).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = 0
		for i := range l.Items {
			if jobRunning(&l.Items[i]) {
				got++
			}
		}
		return got == want, nil
	})
	if err != nil {
		k.t.Fatalf("team D: %d Jobs admitted, want %d (100 units, 25 a claim): %v\n%s", got, want, err, k.queuesState())
	}
}

// draJob is a suspended Job in team D's queue whose pod uses a claim from
// template (and names no scheduler that runs).
func draJob(name, template string) *batchv1.Job {
	j := kueueJob(teamD, name, 0, 0, "", shortJob)
	spec := &j.Spec.Template.Spec
	spec.SchedulerName = noScheduler
	spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: harness.DRARequest}}}
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: harness.DRARequest, ResourceClaimTemplateName: ptr.To(template)}}
	return j
}

// resourceQuota: a namespace ResourceQuota on the share class bounds the
// number of claims' devices, not their units or memory: with two devices
// allowed, a claim of a whole GPU's 100 units and 16 GiB and one of 1 unit
// and 1 MiB are both admitted, each counted as one device; a third is
// refused by the API server.
func (k *kueueEnv) resourceQuota(ctx context.Context) {
	const quotaNS = "quota"
	devices := corev1.ResourceName(harness.DRAClassShare + ".deviceclass.resource.k8s.io/devices")
	k.apply(fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpus, namespace: %[1]s}
spec:
  hard: {%[2]s: "2"}
`, quotaNS, devices))
	// The quota controller computes its first status; until then the
	// admission plugin refuses every claim of the namespace.
	if err := harness.WaitFor(kueueStepCtx(ctx), 100*time.Millisecond, func() (bool, error) {
		q, err := k.cp.Client.CoreV1().ResourceQuotas(quotaNS).Get(ctx, "gpus", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, err
	}); err != nil {
		k.t.Fatalf("ResourceQuota never got a status: %v", err)
	}
	claim := func(name string, units, memory int64) error {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: quotaNS, Name: name},
			Spec: harness.DRAClaimSpec(harness.GPURequest{Units: units, Memory: memory})}
		_, err := k.cp.Client.ResourceV1().ResourceClaims(quotaNS).Create(ctx, c, metav1.CreateOptions{})
		return err
	}
	if err := claim("whole-gpu-share", unitsPerGPU, 16*gi); err != nil {
		k.t.Fatalf("first claim: %v", err)
	}
	if err := claim("tiny-share", 1, 1<<20); err != nil {
		k.t.Fatalf("second claim: %v", err)
	}
	err := claim("third", 1, 1<<20)
	if err == nil || !strings.Contains(err.Error(), "exceeded quota") {
		k.t.Fatalf("third claim past a quota of 2 devices: %v, want exceeded quota", err)
	}
	q, gerr := k.cp.Client.CoreV1().ResourceQuotas(quotaNS).Get(ctx, "gpus", metav1.GetOptions{})
	if gerr != nil {
		k.t.Fatal(gerr)
	}
	used := q.Status.Used[devices]
	if used.Cmp(resource.MustParse("2")) != 0 {
		k.t.Fatalf("quota used %s devices, want 2", used.String())
	}
	fmt.Fprintf(k.walk, "# ResourceQuota on the share class\n")
	_, _ = k.run("", "describe", "resourcequota", "-n", quotaNS, "gpus")
	k.t.Logf("e2e: kueue: ResourceQuota %s: 2 claims (100 units + 16Gi, 1 unit + 1Mi) = %s devices; the third refused: %v", devices, used.String(), err)
}
