//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

const (
	kueueJobs = 100
	quarter   = 25
	half      = 50
	gi        = int64(1) << 30
	// longJob is how long the pods that hold quota while another step
	// happens sleep (they are deleted or preempted first); shortJob the
	// burst jobs'.
	longJob, shortJob = 3600, 3
	kueueStep         = 3 * time.Minute
)

// TestKueue (make e2e-kueue): Kueue's controller (built from source,
// hack/kueue) admits gpuslice shares by two teams' quotas on the real API
// server, the Job controller, gpuslice-scheduler and the real kubelet with
// gpuslice-node's device plugins on 4 simulated GPUs. Both teams'
// ClusterQueues are in one cohort (200 units and 16 GiB each, borrowing
// and lending 100 units and 8 GiB). 100 Jobs of quarter and half GPUs are
// submitted in bursts: team A borrows while team B is idle and Kueue
// reclaims it when B returns; a high-priority Job preempts within A's
// queue; the rest run in bursts of both teams. quotaWatch checks from the
// API that the quotas hold at every change and that every pod that ran had
// its group's share and memory limit on the node. Then bad input (each
// refused with a clear reason, nothing admitted), the DRA path (Kueue
// counting the units of ResourceClaimTemplates, gpuslice's check keeping the
// memory quota) and a namespace ResourceQuota on the share class (devices
// counted, not units or memory). Ends with
// "kueue: <n> jobs admitted, quota exceeded 0 times, borrowed <b>,
// reclaimed <r>, preempted <p>, limits held <k>/<k>".
func TestKueue(t *testing.T) {
	ctx, n, ok := privateNodeWith(t, "TestKueue", []string{"--kueue-admission-check"})
	if !ok {
		return
	}
	defer n.stop()
	k := startKueue(t, ctx, n)
	defer k.stop()
	w := k.watch(ctx)
	submitted := k.borrowAndReclaim(ctx, w)
	submitted += k.preemptInQueue(ctx, w)
	k.bursts(ctx, kueueJobs-submitted)
	bad := k.badInput(ctx)
	k.draQuota(ctx)
	k.resourceQuota(ctx)
	k.noneAdmitted(ctx, w, bad)
	w.checks.Wait()
	k.walkthrough(ctx)

	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.exceeded) > 0 {
		t.Errorf("quota exceeded %d times, first: %s", len(w.exceeded), strings.Join(w.exceeded[:min(5, len(w.exceeded))], "\n"))
	}
	if len(w.podOverlaps) > 0 {
		t.Logf("e2e: kueue: pods of Jobs Kueue had let go of were still there %d times, first: %s",
			len(w.podOverlaps), w.podOverlaps[0])
	}
	if len(w.misses) > 0 {
		t.Errorf("%d pods ran without their limits on the node:\n%s", len(w.misses), strings.Join(w.misses, "\n"))
	}
	reclaimed, preempted := 0, 0
	for _, r := range w.preempts {
		switch r {
		case "InCohortReclamation":
			reclaimed++
		case "InClusterQueue":
			preempted++
		}
	}
	line := fmt.Sprintf("kueue: %d jobs admitted, quota exceeded %d times, borrowed %d, reclaimed %d, preempted %d, limits held %d/%d",
		len(w.jobs), len(w.exceeded), len(w.borrowed), reclaimed, preempted, len(w.held), len(w.checked))
	t.Log(line)
	if p := os.Getenv("GPUSLICE_E2E_SUMMARY"); p != "" {
		writeFile(t, p, line+"\n")
		if b, err := os.ReadFile(k.walk.Name()); err == nil {
			writeFile(t, filepath.Join(filepath.Dir(p), "e2e-kueue-walkthrough.txt"), string(b))
		}
	}
}

func kueueStepCtx(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(ctx, kueueStep)
	go func() { <-c.Done(); cancel() }()
	return c
}

// waitUse waits until cond holds for the teams' usage.
func (k *kueueEnv) waitUse(ctx context.Context, w *quotaWatch, what string, cond func(map[string]usage) bool) {
	var last map[string]usage
	err := harness.WaitFor(kueueStepCtx(ctx), 50*time.Millisecond, func() (bool, error) {
		last = w.snapshot()
		return cond(last), nil
	})
	if err != nil {
		k.t.Fatalf("%s: never (usage %v): %v\n%s", what, last, err, k.queuesState())
	}
}

// queuesState is kubectl's view of the queues and workloads, for failures.
func (k *kueueEnv) queuesState() string {
	out, _ := k.run("", "get", "clusterqueues,workloads", "-A", "-o", "wide")
	return out
}

// waitJobsDone waits until every Job of team named with prefix succeeded.
func (k *kueueEnv) waitJobsDone(ctx context.Context, team, prefix string, want int) {
	var done int
	err := harness.WaitFor(kueueStepCtx(ctx), 200*time.Millisecond, func() (bool, error) {
		l, err := k.cp.Client.BatchV1().Jobs(team).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		done = 0
		for _, j := range l.Items {
			if strings.HasPrefix(j.Name, prefix) && j.Status.Succeeded > 0 {
				done++
			}
		}
		return done == want, nil
	})
	if err != nil {
		k.t.Fatalf("%s's %s jobs: %d of %d succeeded: %v\n%s", team, prefix, done, want, err, k.queuesState())
	}
}

// borrowAndReclaim: team A asks for 8 half GPUs while B is idle and gets
// its 200 units and 100 borrowed (6 jobs); B's 8 quarter GPUs then take
// back what B lends: Kueue preempts A's borrowing jobs. Returns the number
// of Jobs submitted.
func (k *kueueEnv) borrowAndReclaim(ctx context.Context, w *quotaWatch) int {
	units := api.ResourceUnits
	for i := range 8 {
		k.createJob(ctx, kueueJob(teamA, fmt.Sprintf("a-long-%d", i), half, 4*gi, "low", longJob))
	}
	q := quotas[units]
	k.waitUse(ctx, w, "team A borrowing to its limit while B is idle", func(u map[string]usage) bool {
		return u[teamA][units] == q.nominal+q.borrowing && u[teamB][units] == 0
	})
	k.logQueues("team A borrowing")
	for i := range 8 {
		k.createJob(ctx, kueueJob(teamB, fmt.Sprintf("b-back-%d", i), quarter, 2*gi, "low", shortJob))
	}
	k.waitUse(ctx, w, "team B back at its nominal quota, A at its own", func(u map[string]usage) bool {
		return u[teamB][units] == q.nominal && u[teamA][units] <= q.nominal
	})
	k.logQueues("team B back, A's borrowing reclaimed")
	if w.preempted("InCohortReclamation") == 0 {
		k.t.Fatalf("team B got its quota back without Kueue reclaiming from A\n%s", k.queuesState())
	}
	k.waitJobsDone(ctx, teamB, "b-back-", 8)
	k.deleteJobs(ctx, teamA, "a-long-")
	k.waitUse(ctx, w, "both teams idle", func(u map[string]usage) bool { return u[teamA][units] == 0 && u[teamB][units] == 0 })
	return 16
}

// preemptInQueue: both teams at their nominal quota with low-priority
// jobs (nothing to borrow, nothing to reclaim); a high-priority half GPU in
// A's queue preempts one of A's. Returns the number of Jobs submitted.
func (k *kueueEnv) preemptInQueue(ctx context.Context, w *quotaWatch) int {
	units := api.ResourceUnits
	for i := range 4 {
		k.createJob(ctx, kueueJob(teamB, fmt.Sprintf("b-hold-%d", i), half, 4*gi, "low", longJob))
		k.createJob(ctx, kueueJob(teamA, fmt.Sprintf("a-low-%d", i), half, 4*gi, "low", longJob))
	}
	nominal := quotas[units].nominal
	k.waitUse(ctx, w, "both teams at their nominal quota", func(u map[string]usage) bool {
		return u[teamA][units] == nominal && u[teamB][units] == nominal
	})
	k.createJob(ctx, kueueJob(teamA, "a-high", half, 4*gi, "high", shortJob))
	k.waitJobsDone(ctx, teamA, "a-high", 1)
	k.logQueues("a high-priority job preempted a low-priority one of its team")
	if w.preempted("InClusterQueue") == 0 {
		k.t.Fatalf("the high-priority job ran without Kueue preempting in its queue\n%s", k.queuesState())
	}
	k.deleteJobs(ctx, teamA, "a-low-")
	k.deleteJobs(ctx, teamB, "b-hold-")
	k.waitUse(ctx, w, "both teams idle", func(u map[string]usage) bool { return u[teamA][units] == 0 && u[teamB][units] == 0 })
	return 9
}

// bursts submits n short Jobs, a third of them half GPUs and the rest
// quarters, in bursts of about 17 alternating between the teams, a second
// apart, and waits until all succeeded.
func (k *kueueEnv) bursts(ctx context.Context, n int) {
	count := map[string]int{}
	for i := 0; i < n; {
		team := []string{teamA, teamB}[(i/17)%2]
		for b := 0; b < 17 && i < n; b, i = b+1, i+1 {
			units, mem := int64(quarter), 2*gi
			if i%3 == 0 {
				units, mem = half, 4*gi
			}
			k.createJob(ctx, kueueJob(team, fmt.Sprintf("burst-%d", i), units, mem, "", shortJob))
			count[team]++
		}
		time.Sleep(time.Second)
	}
	for team, c := range count {
		k.waitJobsDone(ctx, team, "burst-", c)
	}
}

// logQueues writes the ClusterQueues' usage to the walkthrough under a heading.
func (k *kueueEnv) logQueues(heading string) {
	fmt.Fprintf(k.walk, "# %s\n", heading)
	for _, q := range []string{teamA, teamB} {
		_, _ = k.run("", "get", "clusterqueue", q, "-o",
			`jsonpath={range .status.flavorsReservation[*].resources[*]}{.name}: {.total} (borrowed {.borrowed}){"\n"}{end}`)
	}
	_, _ = k.run("", "get", "workloads", "-A")
}

// walkthrough records what docs/queues.md shows.
func (k *kueueEnv) walkthrough(ctx context.Context) {
	fmt.Fprintf(k.walk, "# the end\n")
	_, _ = k.run("", "get", "clusterqueues", "-o", "wide")
	_, _ = k.run("", "get", "localqueues", "-A")
	k.t.Logf("e2e: kueue walkthrough in %s", k.walk.Name())
	_ = ctx
}

// jobPods lists the pods of a Job.
func (k *kueueEnv) jobPods(ctx context.Context, j *batchv1.Job) []corev1.Pod {
	l, err := k.cp.Client.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + j.Name})
	if err != nil {
		k.t.Fatal(err)
	}
	return l.Items
}

// badInput: a ClusterQueue naming a gpuslice.io resource gpuslice does not
// serve, and one whose memory quota is smaller than one share, get a
// Warning event from gpuslice-scheduler's check; a Job asking for such a
// resource, one asking for a share no GPU can hold (150 units; 20 GiB of a
// 16 GiB GPU) and one asking for more than its queue's whole quota each get
// a Workload condition or check state saying so; it returns them for
// noneAdmitted, which checks at the end of the run that none was admitted or
// had a pod.
func (k *kueueEnv) badInput(ctx context.Context) []*batchv1.Job {
	k.apply(soloQueue("team-c", "20", "512Ki") + `---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: typo}
spec:
  resourceGroups:
  - coveredResources: [gpuslice.io/gpu-unit]
    flavors:
    - name: gpuslice
      resources:
      - {name: gpuslice.io/gpu-unit, nominalQuota: 100}
`)
	k.waitQueueEvent(ctx, "typo", "gpuslice.io/gpu-unit is not a resource gpuslice serves")
	k.waitQueueEvent(ctx, "team-c", "gpuslice.io/gpu-memory quota 512Ki (with its borrowing limit) is smaller than one share (1Mi)")

	typo := kueueJob(teamA, "bad-name", quarter, 2*gi, "", shortJob)
	c := &typo.Spec.Template.Spec.Containers[0]
	c.Resources.Limits["gpuslice.io/gpu-unit"] = c.Resources.Limits[api.ResourceUnits]
	delete(c.Resources.Limits, api.ResourceUnits)
	bad := []struct {
		job  *batchv1.Job
		want string
	}{
		{typo, "gpuslice.io/gpu-unit"},
		{kueueJob(teamA, "bad-units", 150, 2*gi, "", shortJob), "asks for 150 units and 2Gi of memory of one GPU, which no GPU in the cluster can hold"},
		{kueueJob(teamA, "bad-memory", quarter, 20*gi, "", shortJob), "asks for 25 units and 20Gi of memory of one GPU, which no GPU in the cluster can hold"},
		{kueueJob("team-c", "bad-quota", quarter, 2*gi, "", shortJob), "insufficient quota"},
	}
	for _, b := range bad {
		k.createJob(ctx, b.job)
	}
	for _, b := range bad {
		msg := k.waitWorkloadSays(ctx, b.job, b.want)
		k.t.Logf("e2e: kueue: Job %s/%s not admitted: %s", b.job.Namespace, b.job.Name, msg)
	}
	_, _ = k.run("", "get", "workloads", "-A")
	jobs := make([]*batchv1.Job, len(bad))
	for i, b := range bad {
		jobs[i] = b.job
	}
	return jobs
}

// noneAdmitted checks, at the end of the run (the DRA and ResourceQuota steps
// after badInput give a late admission minutes to show, where a sleep would
// give it seconds), that the watcher never saw a bad Job admitted or running
// and that none has a pod.
func (k *kueueEnv) noneAdmitted(ctx context.Context, w *quotaWatch, bad []*batchv1.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range bad {
		key := j.Namespace + "/" + j.Name
		if w.admitted[key] || w.jobs[key] || len(k.jobPods(ctx, j)) > 0 {
			k.t.Errorf("bad Job %s was admitted (admitted %v, had pods %v)", key, w.admitted[key], w.jobs[key])
		}
	}
}

// waitQueueEvent waits for gpuslice-scheduler's Warning event on a ClusterQueue containing want.
func (k *kueueEnv) waitQueueEvent(ctx context.Context, queue, want string) {
	var seen []string
	err := harness.WaitFor(kueueStepCtx(ctx), 200*time.Millisecond, func() (bool, error) {
		l, err := k.cp.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + queue})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range l.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Type == corev1.EventTypeWarning && e.Reason == "GPUSliceQuota" && strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		k.t.Fatalf("ClusterQueue %s: no Warning event saying %q: %v (events: %q)", queue, want, err, seen)
	}
	k.t.Logf("e2e: kueue: ClusterQueue %s: %s", queue, seen[len(seen)-1])
}

// waitWorkloadSays waits until the Workload of Job j has a condition,
// admission check state or event whose message contains want, and returns it.
func (k *kueueEnv) waitWorkloadSays(ctx context.Context, j *batchv1.Job, want string) string {
	var msgs []string
	err := harness.WaitFor(kueueStepCtx(ctx), 200*time.Millisecond, func() (bool, error) {
		l, err := k.cp.Dynamic.Resource(workloadsGVR).Namespace(j.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		msgs = msgs[:0]
		for i := range l.Items {
			u := &l.Items[i]
			if len(u.GetOwnerReferences()) == 0 || u.GetOwnerReferences()[0].Name != j.Name {
				continue
			}
			msgs = append(msgs, workloadMessages(u)...)
			// Kueue's reason for a Workload it cannot admit is also an
			// event (its condition is not always rewritten for it).
			ev, err := k.cp.Client.CoreV1().Events(j.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + u.GetName()})
			if err != nil {
				return false, err
			}
			for _, e := range ev.Items {
				msgs = append(msgs, "event "+e.Reason+": "+e.Message)
			}
		}
		for _, m := range msgs {
			if strings.Contains(m, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		k.t.Fatalf("Job %s/%s: its Workload never said %q: %v (said %q)\n%s", j.Namespace, j.Name, want, err, msgs, k.queuesState())
	}
	for _, m := range msgs {
		if strings.Contains(m, want) {
			return m
		}
	}
	return ""
}
