//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// The two teams' namespaces (each with a LocalQueue "gpus" of its own
// ClusterQueue, named as the namespace) and the label every test Job's pods
// carry.
const (
	teamA       = "team-a"
	teamB       = "team-b"
	kueueLabel  = "gpuslice.io/e2e-kueue"
	queueLabel  = "kueue.x-k8s.io/queue-name"
	prioLabel   = "kueue.x-k8s.io/priority-class"
	localQueue  = "gpus"
	unitsPerGPU = 100
)

var workloadsGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}

// teamQuota is one ClusterQueue's quota for one resource.
type teamQuota struct{ nominal, borrowing, lending int64 }

// quotas are both teams' (the same): units and memory bytes. The cohort's
// 400 units and 32 GiB are the node's 4 GPUs' units, and half of their memory.
var quotas = map[corev1.ResourceName]teamQuota{
	api.ResourceUnits:  {nominal: 200, borrowing: 100, lending: 100},
	api.ResourceMemory: {nominal: 16 << 30, borrowing: 8 << 30, lending: 8 << 30},
}

// kueueEnv is the node with Kueue's controller and the Job controller.
type kueueEnv struct {
	*node
	t       *testing.T
	kubectl string
	// walk is the walkthrough file (kubectl commands and their output,
	// for docs/queues.md).
	walk  *os.File
	procs []*harness.Process
}

// startKueue starts kube-controller-manager's Job, garbage-collector and
// resource-quota controllers and Kueue's controller manager, installs
// Kueue's CRDs and applies the teams' queues (kueueQueues).
func startKueue(t *testing.T, ctx context.Context, n *node) *kueueEnv {
	kcm := need(t, "GPUSLICE_KCM")
	bins, err := harness.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	kdir, err := harness.FindKueue()
	if err != nil {
		t.Fatal(err)
	}
	k := &kueueEnv{node: n, t: t, kubectl: bins.Path("kubectl")}
	if k.walk, err = os.Create(filepath.Join(n.dir, "kueue-walkthrough.txt")); err != nil {
		t.Fatal(err)
	}
	cm, err := n.cp.StartControllers(kcm, "job-controller", "garbage-collector-controller", "resourcequota-controller")
	if err != nil {
		t.Fatal(err)
	}
	k.procs = append(k.procs, cm)
	if err := n.cp.InstallKueueCRDs(ctx, kdir); err != nil {
		t.Fatal(err)
	}
	kp, err := n.cp.StartKueue(ctx, kdir, kueueDRAConfig, "VisibilityOnDemand=false,"+kueueDRAGates)
	if err != nil {
		t.Fatal(err)
	}
	k.procs = append(k.procs, kp)
	k.apply(kueueQueues())
	return k
}

func (k *kueueEnv) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, team := range []string{teamA, teamB} {
		_ = k.cp.Client.BatchV1().Jobs(team).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}, metav1.ListOptions{})
		_ = k.cp.Client.CoreV1().Pods(team).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{})
	}
	_ = harness.WaitFor(ctx, 200*time.Millisecond, func() (bool, error) {
		l, err := k.cp.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: kueueLabel})
		return err == nil && len(l.Items) == 0, nil
	})
	for i := len(k.procs) - 1; i >= 0; i-- {
		k.procs[i].Stop()
	}
	k.walk.Close()
}

// run runs kubectl with args (stdin, if not empty), writes the command and
// its output to the walkthrough and returns the output.
func (k *kueueEnv) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command(k.kubectl, append([]string{"--kubeconfig", k.cp.Kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	fmt.Fprintf(k.walk, "$ kubectl %s\n%s\n", strings.Join(args, " "), out)
	return string(out), err
}

func (k *kueueEnv) apply(yaml string) {
	if out, err := k.run(yaml, "apply", "--server-side", "-f", "-"); err != nil {
		k.t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, yaml)
	}
}

// kueueQueues: one ResourceFlavor, two teams' ClusterQueues in the cohort
// "gpus" (units and memory, each with borrowing and lending limits;
// preemption within the queue by priority, reclaim within the cohort),
// their LocalQueues, two WorkloadPriorityClasses, and gpuslice-scheduler's
// admission check (gpuslice.io/fits) on both queues.
func kueueQueues() string {
	u, m := quotas[api.ResourceUnits], quotas[api.ResourceMemory]
	var b strings.Builder
	b.WriteString(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpuslice}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: gpuslice-fits}
spec: {controllerName: gpuslice.io/fits}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low}
value: 0
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
`)
	for _, team := range []string{teamA, teamB} {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  cohortName: gpus
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  preemption: {withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}
  admissionChecksStrategy: {admissionChecks: [{name: gpuslice-fits}]}
  resourceGroups:
  - coveredResources: [%[2]s, %[3]s]
    flavors:
    - name: gpuslice
      resources:
      - {name: %[2]s, nominalQuota: %[4]d, borrowingLimit: %[5]d, lendingLimit: %[6]d}
      - {name: %[3]s, nominalQuota: %[7]s, borrowingLimit: %[8]s, lendingLimit: %[9]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: %[10]s, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, team, api.ResourceUnits, api.ResourceMemory, u.nominal, u.borrowing, u.lending,
			gib(m.nominal), gib(m.borrowing), gib(m.lending), localQueue)
	}
	return b.String()
}

func gib(v int64) string { return resource.NewQuantity(v, resource.BinarySI).String() }

// kueueJob is a suspended Job of one pod in team's LocalQueue asking for
// units and memory of one GPU (limits of the device plugin's extended
// resources), of priority class prio, whose pod sleeps for seconds.
func kueueJob(team, name string, units, memory int64, prio string, seconds int) *batchv1.Job {
	limits := corev1.ResourceList{
		api.ResourceUnits:  *resource.NewQuantity(units, resource.DecimalSI),
		api.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
	}
	labels := map[string]string{queueLabel: localQueue}
	if prio != "" {
		labels[prioLabel] = prio
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{
			Suspend: ptr.To(true), Parallelism: ptr.To(int32(1)), Completions: ptr.To(int32(1)), BackoffLimit: ptr.To(int32(0)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{kueueLabel: "1"}},
				Spec: corev1.PodSpec{
					SchedulerName: scheduler, HostNetwork: true, TerminationGracePeriodSeconds: ptr.To(int64(0)),
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: corev1.PullNever,
						Command:   []string{"/bin/busybox", "sleep", fmt.Sprint(seconds)},
						Resources: corev1.ResourceRequirements{Limits: limits}}},
				},
			},
		},
	}
}

func (k *kueueEnv) createJob(ctx context.Context, j *batchv1.Job) {
	if _, err := k.cp.Client.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

// deleteJobs deletes team's Jobs whose names start with prefix, and their pods.
func (k *kueueEnv) deleteJobs(ctx context.Context, team, prefix string) {
	l, err := k.cp.Client.BatchV1().Jobs(team).List(ctx, metav1.ListOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	for _, j := range l.Items {
		if strings.HasPrefix(j.Name, prefix) {
			if err := k.cp.Client.BatchV1().Jobs(team).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
				k.t.Fatal(err)
			}
		}
	}
}

// workloadCondition returns the named condition of a Workload object, or nil.
func workloadCondition(u *unstructured.Unstructured, kind string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == kind {
			return m
		}
	}
	return nil
}

// workloadMessages are a Workload's conditions' and admission checks'
// "type/name reason: message" lines.
func workloadMessages(u *unstructured.Unstructured) []string {
	var out []string
	for _, path := range [][]string{{"status", "conditions"}, {"status", "admissionChecks"}} {
		items, _, _ := unstructured.NestedSlice(u.Object, path...)
		for _, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, fmt.Sprintf("%v%v %v%v: %v", m["type"], m["name"], m["status"], m["state"], m["message"]))
		}
	}
	return out
}

// soloQueue is a team's namespace, its ClusterQueue of units and memory
// (no cohort; gpuslice's check) and its LocalQueue "gpus", as YAML.
func soloQueue(team, units, memory string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %[1]s}}
  admissionChecksStrategy: {admissionChecks: [{name: gpuslice-fits}]}
  resourceGroups:
  - coveredResources: [%[2]s, %[3]s]
    flavors:
    - name: gpuslice
      resources:
      - {name: %[2]s, nominalQuota: %[4]s}
      - {name: %[3]s, nominalQuota: %[5]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: %[6]s, namespace: %[1]s}
spec: {clusterQueue: %[1]s}
`, team, api.ResourceUnits, api.ResourceMemory, units, memory, localQueue)
}
