//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// usage is what a team's pods ask for, per quota resource.
type usage map[corev1.ResourceName]int64

// quotaWatch checks the teams' quotas from the API server, not from Kueue's
// status: at every change of the teams' Jobs it sums what the Jobs Kueue
// has let run ask for (a Job counts from the moment it is unsuspended, which
// Kueue does only once it admitted it, until it is suspended again, complete,
// failed or deleted: Kueue gives its quota back only after these, so the
// Jobs' watch stream orders them) and counts every moment a team's sum is
// past its nominal quota plus its borrowing limit, or the teams together
// borrow more than they lend. It sums the pods too (those that exist, are
// not being deleted and have not ended): a pod can outlive its Job's
// admission for a moment (a Job Kueue evicts just after admitting it, before
// the Job controller counted its new pod as active: Kueue then gives the
// quota back while the pod is still there), which it counts apart
// (podOverlaps). It checks, for every pod that runs, that its time-slice
// group on the node has the share and memory limit it asked for, and records
// Kueue's preemptions from the Workloads' Preempted conditions.
type quotaWatch struct {
	k        *kueueEnv
	mu       sync.Mutex
	use      map[string]usage // of the running (unsuspended, unfinished) Jobs
	exceeded []string
	// podOverlaps are the moments the pods' sums broke the quotas.
	podOverlaps []string
	jobs        map[string]bool // team/job: Kueue let it run (unsuspended) at least once
	running     map[string]bool // team/job: unsuspended and unfinished now
	borrowed    map[string]bool // team/job started with its team past its nominal quota
	peak        map[string]usage
	// preempts are Kueue's preemptions, workload UID -> reason.
	preempts map[types.UID]string
	// admitted are the Jobs (team/job) whose Workload Kueue admitted.
	admitted map[string]bool
	checks   sync.WaitGroup
	checked  map[types.UID]bool
	held     map[types.UID]bool
	misses   []string
}

func (k *kueueEnv) watch(ctx context.Context) *quotaWatch {
	w := &quotaWatch{k: k, use: map[string]usage{}, jobs: map[string]bool{}, running: map[string]bool{}, borrowed: map[string]bool{},
		peak: map[string]usage{teamA: {}, teamB: {}}, preempts: map[types.UID]string{}, admitted: map[string]bool{},
		checked: map[types.UID]bool{}, held: map[types.UID]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(k.cp.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kueueLabel }))
	pods := f.Core().V1().Pods().Informer()
	recount := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			w.observe(ctx, pods.GetStore(), p)
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: recount, UpdateFunc: func(_, obj any) { recount(obj) },
		DeleteFunc: func(any) { w.observe(ctx, pods.GetStore(), nil) },
	}); err != nil {
		k.t.Fatal(err)
	}
	jf := informers.NewSharedInformerFactoryWithOptions(k.cp.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = queueLabel }))
	jobs := jf.Batch().V1().Jobs().Informer()
	rejob := func(obj any) {
		if j, ok := obj.(*batchv1.Job); ok {
			w.observeJobs(jobs.GetStore(), j)
		}
	}
	if _, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: rejob, UpdateFunc: func(_, obj any) { rejob(obj) },
		DeleteFunc: func(any) { w.observeJobs(jobs.GetStore(), nil) },
	}); err != nil {
		k.t.Fatal(err)
	}
	jf.Start(ctx.Done())
	df := dynamicinformer.NewDynamicSharedInformerFactory(k.cp.Dynamic, 0)
	wls := df.ForResource(workloadsGVR).Informer()
	if _, err := wls.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: w.workload, UpdateFunc: func(_, obj any) { w.workload(obj) },
	}); err != nil {
		k.t.Fatal(err)
	}
	f.Start(ctx.Done())
	df.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, wls.HasSynced, jobs.HasSynced) {
		k.t.Fatal("informers never synced")
	}
	return w
}

func (w *quotaWatch) workload(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := workloadCondition(u, "Preempted"); c != nil && c["status"] == "True" {
		w.preempts[u.GetUID()] = fmt.Sprint(c["reason"])
	}
	if c := workloadCondition(u, "Admitted"); c != nil && c["status"] == "True" {
		for _, o := range u.GetOwnerReferences() {
			w.admitted[u.GetNamespace()+"/"+o.Name] = true
		}
	}
}

// limits is what the pod's container asks for, per quota resource.
func limits(p *corev1.Pod) usage {
	out := usage{}
	for _, c := range p.Spec.Containers {
		for _, r := range []corev1.ResourceName{api.ResourceUnits, api.ResourceMemory} {
			if q, ok := c.Resources.Limits[r]; ok {
				out[r] += q.Value()
			}
		}
	}
	return out
}

func counted(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// observe recounts the pods' sums after a change of pod p (nil: a pod
// gone) and starts the limit check of a pod seen running.
func (w *quotaWatch) observe(ctx context.Context, store cache.Store, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	use := map[string]usage{teamA: {}, teamB: {}}
	for _, obj := range store.List() {
		q, ok := obj.(*corev1.Pod)
		if !ok || !counted(q) || use[q.Namespace] == nil {
			continue
		}
		for r, v := range limits(q) {
			use[q.Namespace][r] += v
		}
	}
	if msg := overQuota(use); msg != "" {
		w.podOverlaps = append(w.podOverlaps, fmt.Sprintf("%s (after pod %s)", msg, podName(p)))
	}
	if p != nil && counted(p) && p.Status.Phase == corev1.PodRunning && !w.checked[p.UID] {
		w.checked[p.UID] = true
		w.checks.Add(1)
		go w.checkLimits(ctx, p.DeepCopy())
	}
}

// jobRunning: Kueue let the Job run (unsuspended) and it has not finished.
func jobRunning(j *batchv1.Job) bool {
	if j.DeletionTimestamp != nil || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
		return false
	}
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	return true
}

// observeJobs recounts the teams' usage after a change of Job j (nil: one gone).
func (w *quotaWatch) observeJobs(store cache.Store, j *batchv1.Job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	use := map[string]usage{teamA: {}, teamB: {}}
	running := map[string]bool{}
	for _, obj := range store.List() {
		q, ok := obj.(*batchv1.Job)
		if !ok || !jobRunning(q) || use[q.Namespace] == nil {
			continue
		}
		running[q.Namespace+"/"+q.Name] = true
		pod := &corev1.Pod{Spec: q.Spec.Template.Spec}
		for r, v := range limits(pod) {
			use[q.Namespace][r] += v * int64(ptr.Deref(q.Spec.Parallelism, 1))
		}
	}
	w.use = use
	if msg := overQuota(use); msg != "" {
		name := "deleted"
		if j != nil {
			name = j.Namespace + "/" + j.Name
		}
		w.exceeded = append(w.exceeded, fmt.Sprintf("%s (after Job %s)", msg, name))
	}
	for team, u := range use {
		for r, v := range u {
			w.peak[team][r] = max(w.peak[team][r], v)
		}
	}
	for job := range running {
		if w.running[job] {
			continue
		}
		w.jobs[job] = true
		team, _, _ := strings.Cut(job, "/")
		for r, q := range quotas {
			if use[team][r] > q.nominal {
				w.borrowed[job] = true
			}
		}
	}
	w.running = running
}

func podName(p *corev1.Pod) string {
	if p == nil {
		return "deleted"
	}
	return p.Namespace + "/" + p.Name
}

// overQuota says how use breaks the teams' quotas ("" if it does not): a
// team past its nominal quota plus its borrowing limit, or the teams
// together using more of the cohort than they lend to it (a team's usage
// past its nominal quota less its lending limit comes from the cohort).
func overQuota(use map[string]usage) string {
	var out []string
	for r, q := range quotas {
		var fromCohort int64
		for team, u := range use {
			if u[r] > q.nominal+q.borrowing {
				out = append(out, fmt.Sprintf("%s uses %d %s, past %d+%d", team, u[r], r, q.nominal, q.borrowing))
			}
			fromCohort += max(0, u[r]-(q.nominal-q.lending))
		}
		if lent := q.lending * int64(len(use)); fromCohort > lent {
			out = append(out, fmt.Sprintf("the cohort lends %d %s, %d in use", lent, r, fromCohort))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// checkLimits waits (until the pod ends) for its group on the node to have
// the share (units / 100) and memory limit the pod asked for.
func (w *quotaWatch) checkLimits(ctx context.Context, p *corev1.Pod) {
	defer w.checks.Done()
	want := limits(p)
	name := groupOf(p)
	var share, mem string
	for ctx.Err() == nil {
		share, mem = w.k.groupFile(name, group.FileShare), w.k.groupFile(name, group.FileMemoryMax)
		s, err := group.ParseShare(share)
		if err == nil && s == float64(want[api.ResourceUnits])/unitsPerGPU && limitOf(mem) == uint64(want[api.ResourceMemory]) {
			w.mu.Lock()
			w.held[p.UID] = true
			w.mu.Unlock()
			return
		}
		if _, err := os.Stat(filepath.Join(w.k.runDir(), "groups", name)); err != nil {
			if cur, gerr := w.k.cp.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); gerr != nil || !counted(cur) {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.mu.Lock()
	w.misses = append(w.misses, fmt.Sprintf("%s/%s: group %s share %q memory.max %q, want %d units %d bytes",
		p.Namespace, p.Name, name, share, mem, want[api.ResourceUnits], want[api.ResourceMemory]))
	w.mu.Unlock()
}

// snapshot returns a copy of the teams' usage now.
func (w *quotaWatch) snapshot() map[string]usage {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]usage{}
	for team, u := range w.use {
		out[team] = usage{}
		for r, v := range u {
			out[team][r] = v
		}
	}
	return out
}

// preempted counts Kueue's preemptions for reason.
func (w *quotaWatch) preempted(reason string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.preempts {
		if r == reason {
			n++
		}
	}
	return n
}
