package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	devconfig "github.com/opencontainers/cgroups/devices/config"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/hotplug"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// reconciler keeps each running container's GPU devices equal to its
// pod's assignment: on every assignment change, container start, and every
// resync period (undoing runtime rewrites); after a restart its first pass
// reads the kernel's state and finishes whatever a killed agent left.
type reconciler struct {
	client   kubernetes.Interface
	pods     listersv1.PodLister
	gpus     map[string]gpuset.GPU // by UUID
	managed  []devconfig.Device
	mounts   hotplug.Mounts
	progs    *hotplug.Programs
	procRoot string
	runtime  *knownContainers
	resync   time.Duration
	queue    workqueue.TypedRateLimitingInterface[string]
	// tree holds the groups Allocate made; gcAge is how old a group of a
	// container no longer on the node must be before it is removed.
	tree   group.Tree
	groups *groupmgr.Manager // changes a group's settings
	units  unitsTotal        // each GPU's units total, for shares
	gcAge  time.Duration
	// cgroupPids lists a cgroup directory's processes (nil: its
	// cgroup.procs, through opencontainers/cgroups).
	cgroupPids func(dir string) ([]int, error)
	// observe gets each pod's hot-plug latency: from the agent seeing a
	// new assignment (seen, by pod key) to its devices applied.
	observe func(time.Duration)
	seenMu  sync.Mutex
	seen    map[string]time.Time
	// badShareMax is, per pod, the malformed share ceiling last reported
	// in an Event (guarded by seenMu; at most maxSeen pods).
	badShareMax map[types.UID]string
}

// maxSeen bounds the assignment changes waiting to be applied that are
// timed (pods on one node).
const maxSeen = 4096

func (r *reconciler) markSeen(key string) {
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	if _, ok := r.seen[key]; !ok && len(r.seen) < maxSeen {
		r.seen[key] = time.Now()
	}
}

// applied ends the timing of key's assignment change: observed when
// devices changed, dropped when nothing was left to do.
func (r *reconciler) applied(key string, changed bool) {
	r.seenMu.Lock()
	at, ok := r.seen[key]
	delete(r.seen, key)
	r.seenMu.Unlock()
	if ok && changed && r.observe != nil {
		r.observe(time.Since(at))
	}
}

// managedNodes are the GPU device nodes the reconciler gives and takes
// away: read-write for the container, mode 0666 like the driver's.
func managedNodes(gpus []gpuset.GPU) []devconfig.Device {
	out := make([]devconfig.Device, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, devconfig.Device{Path: devPath(g.Minor), FileMode: 0o666,
			Rule: devconfig.Rule{Type: devconfig.CharDevice, Major: nvidiaMajor, Minor: int64(g.Minor), Permissions: "rw"}})
	}
	return out
}

// nvidiaMajor is the character device major of /dev/nvidiaN.
const nvidiaMajor = 195

func devPath(minor uint32) string { return "/dev/nvidia" + strconv.FormatUint(uint64(minor), 10) }

// handler enqueues pods with an assignment.
func (r *reconciler) handler() cache.ResourceEventHandler {
	add := func(old, obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Annotations[api.AnnotationAssignment] == "" {
			return
		}
		key, err := cache.MetaNamespaceKeyFunc(pod)
		if err != nil {
			return
		}
		if o, ok := old.(*corev1.Pod); !ok || o.Annotations[api.AnnotationAssignment] != pod.Annotations[api.AnnotationAssignment] {
			r.markSeen(key)
		}
		r.queue.Add(key)
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { add(nil, obj) }, UpdateFunc: add,
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				r.applied(key, false)
			}
		}}
}

func (r *reconciler) run(ctx context.Context) error {
	go func() {
		t := time.NewTicker(r.resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				r.queue.ShutDown()
				return
			case <-t.C:
			}
			pods, err := r.pods.List(labels.Everything())
			if err != nil {
				continue
			}
			r.gcGroups(ctx, pods)
			r.forgetPods(pods)
			for _, p := range pods {
				if key, err := cache.MetaNamespaceKeyFunc(p); err == nil && p.Annotations[api.AnnotationAssignment] != "" {
					r.queue.Add(key)
				}
			}
		}
	}()
	for {
		key, quit := r.queue.Get()
		if quit {
			return nil
		}
		if err := r.syncPod(ctx, key); err != nil {
			klog.FromContext(ctx).Error(err, "apply devices", "pod", key)
			r.queue.AddRateLimited(key)
		} else {
			r.queue.Forget(key)
		}
		r.queue.Done(key)
	}
}

func (r *reconciler) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	pod, err := r.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("get pod: %w", err)
	}
	// A malformed assignment grants nothing: every GPU is taken away.
	want := map[string][]api.GPUAssignment{}
	var errs []error
	if a, err := api.ParseAssignment(pod.Annotations[api.AnnotationAssignment]); err != nil {
		errs = append(errs, err)
	} else {
		for _, c := range a.Containers {
			want[c.Name] = c.GPUs
		}
	}
	if err := applySettings(ctx, r.groups, r.units, pod, want, r.memoryOver(ctx), r.shareMaxTold(ctx)); err != nil {
		errs = append(errs, err)
	}
	var applied api.Applied
	anyChanged, waiting := false, false
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.ContainerID == "" {
			waiting = waiting || len(want[cs.Name]) > 0
			continue
		}
		cid := runtimeID(cs.ContainerID)
		c, err := findContainer(ctx, r.runtime, r.mounts, cid)
		if err == nil {
			err = r.bindContainer(ctx, pod, cs.Name, c)
		}
		var idx []int32
		var changed bool
		var gpus []api.GPUAssignment
		if err == nil {
			gpus, err = r.containerGPUs(pod, cs.Name, want[cs.Name])
		}
		if err == nil {
			idx, changed, err = r.applyContainer(ctx, pod.UID, cid, c, gpus)
		}
		anyChanged = anyChanged || changed
		if errors.Is(err, ErrNoContainer) {
			continue // not started or already gone; the next event says
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", cs.Name, err))
			continue
		}
		applied.Containers = append(applied.Containers, api.AppliedContainer{Name: cs.Name, GPUs: idx})
	}
	err = errors.Join(errs...)
	if err != nil {
		applied.Error = err.Error()
	} else if anyChanged || !waiting {
		r.applied(key, anyChanged)
	}
	return errors.Join(err, r.report(ctx, pod, applied))
}

// bindContainer binds the group of container name of pod (if Allocate made
// one) to the container's cgroup, so that the time-slice daemon identifies
// every process of the container by the kernel's word, whatever its
// environment.
func (r *reconciler) bindContainer(ctx context.Context, pod *corev1.Pod, name string, c hotplug.Container) error {
	g := deviceplugin.GroupName(deviceplugin.Candidate{Name: pod.Name, Container: name, UID: pod.UID})
	if !r.tree.Exists(g) {
		return nil
	}
	p, err := cgroupBinding(r.procRoot, c, r.cgroupPids)
	if err != nil {
		return err
	}
	return bindGroup(ctx, r.tree, g, p)
}

// containerGPUs is what container name of pod is given of its assignment's
// GPUs (assigned): where Allocate made the container a group, the GPUs that
// group holds (the groups manager's Resources.GPUs, which applySettings sets
// from the assignment through the one Set path, once the time-slice daemon has
// applied the group's settings for them): a GPU is hot-added once the group
// holds it, hot-removed once the assignment or the group drops it. A container
// without a group, or a group made before its GPUs were kept (no gpus file),
// is given the assignment's.
func (r *reconciler) containerGPUs(pod *corev1.Pod, name string, assigned []api.GPUAssignment) ([]api.GPUAssignment, error) {
	g := deviceplugin.GroupName(deviceplugin.Candidate{Name: pod.Name, Container: name, UID: pod.UID})
	if !r.tree.Exists(g) {
		return assigned, nil
	}
	res, err := r.groups.Get(g)
	if err != nil {
		return nil, err
	}
	if res.GPUs == nil {
		return assigned, nil
	}
	out := make([]api.GPUAssignment, 0, len(assigned))
	for _, a := range assigned {
		if slices.Contains(res.GPUs, a.UUID) {
			out = append(out, a)
		}
	}
	return out, nil
}

func (r *reconciler) applyContainer(ctx context.Context, uid types.UID, cid string, c hotplug.Container, gpus []api.GPUAssignment) ([]int32, bool, error) {
	want := map[string]bool{}
	idx := make([]int32, 0, len(gpus))
	for _, g := range gpus {
		d, ok := r.gpus[g.UUID]
		if !ok {
			return nil, false, fmt.Errorf("assigned GPU %s is not on this node", g.UUID)
		}
		want[devPath(d.Minor)] = true
		idx = append(idx, g.Index)
	}
	changed, err := hotplug.Apply(r.procRoot, r.progs, c, r.managed, want)
	if err != nil {
		return nil, false, err
	}
	if changed {
		klog.FromContext(ctx).Info("applied devices", "podUID", uid, "container", cid, "gpus", idx, "cgroup", c.Cgroup.String())
	}
	return idx, changed, nil
}

// report writes the applied state on the pod when it changed.
func (r *reconciler) report(ctx context.Context, pod *corev1.Pod, a api.Applied) error {
	s, err := a.Marshal()
	if err != nil {
		return err
	}
	if pod.Annotations[api.AnnotationApplied] == s {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.AnnotationApplied: s}}})
	if err != nil {
		return fmt.Errorf("applied patch: %w", err)
	}
	_, err = r.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("report applied state: %w", err)
	}
	return nil
}

// groupPrefix marks the groups the device plugin makes.
const groupPrefix = "k8s-"

// staleGroups picks the agent's groups (groupPrefix) that belong to no
// container of pods and are older than minAge (a group is made at Allocate,
// possibly before this agent's cache has the pod).
func staleGroups(names []string, pods []*corev1.Pod, age func(string) (time.Duration, bool), minAge time.Duration) []string {
	live := map[string]bool{}
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			live[deviceplugin.GroupName(deviceplugin.Candidate{Name: p.Name, Container: c.Name, UID: p.UID})] = true
		}
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, groupPrefix) || live[n] {
			continue
		}
		if a, ok := age(n); ok && a >= minAge {
			out = append(out, n)
		}
	}
	return out
}

// gcGroups removes the groups of containers that left the node.
func (r *reconciler) gcGroups(ctx context.Context, pods []*corev1.Pod) {
	names, err := r.tree.List()
	if err != nil {
		return
	}
	age := func(n string) (time.Duration, bool) {
		fi, err := os.Stat(r.tree.Path(n))
		if err != nil {
			return 0, false
		}
		return time.Since(fi.ModTime()), true
	}
	for _, n := range staleGroups(names, pods, age, r.gcAge) {
		if err := r.tree.Remove(n); err != nil {
			klog.FromContext(ctx).Error(err, "remove group of a departed container", "group", n)
			continue
		}
		klog.FromContext(ctx).Info("removed group of a departed container", "group", n)
	}
}

// memoryOver reports a limit lowered below what a container holds as a
// Warning Event on its pod.
func (r *reconciler) memoryOver(ctx context.Context) overLimit {
	return func(pod *corev1.Pod, container string, current, limit uint64, n int) {
		r.warn(ctx, pod, api.ReasonMemoryOverLimit, fmt.Sprintf("container %s holds %d bytes of GPU memory on %d GPU(s), "+
			"its new limit is %d bytes per GPU: new allocations fail until it fits; nothing is killed", container, current, n, limit))
	}
}

// warn creates a Warning Event on pod (failures are logged).
func (r *reconciler) warn(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         reason, Type: corev1.EventTypeWarning, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Message: msg, Source: corev1.EventSource{Component: "gpuslice-node"},
	}
	if _, err := r.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "create event", "pod", klog.KObj(pod), "reason", reason)
	}
}

// shareMaxTold reports a malformed share ceiling in a Warning Event, once
// per value and pod.
func (r *reconciler) shareMaxTold(ctx context.Context) shareMaxTold {
	return func(pod *corev1.Pod, bad error) {
		if r.noteShareMax(pod.UID, pod.Annotations[api.AnnotationShareMax], bad != nil) {
			r.warn(ctx, pod, api.ReasonShareMaxInvalid, bad.Error()+"; ignored: the pod's containers keep the ceiling they had")
		}
	}
}

// noteShareMax records whether pod uid's share ceiling v is malformed, and
// says whether to report it: a malformed value not reported yet.
func (r *reconciler) noteShareMax(uid types.UID, v string, bad bool) bool {
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	last, told := r.badShareMax[uid]
	switch {
	case !bad:
		delete(r.badShareMax, uid)
		return false
	case told && last == v:
		return false
	case told || len(r.badShareMax) < maxSeen:
		r.badShareMax[uid] = v
	}
	return true
}

// forgetPods drops what is remembered of pods no longer on the node.
func (r *reconciler) forgetPods(pods []*corev1.Pod) {
	live := make(map[types.UID]bool, len(pods))
	ids := map[string]bool{}
	for _, p := range pods {
		live[p.UID] = true
		for _, cs := range p.Status.ContainerStatuses {
			ids[runtimeID(cs.ContainerID)] = true
		}
	}
	r.runtime.keep(ids)
	r.seenMu.Lock()
	defer r.seenMu.Unlock()
	for uid := range r.badShareMax {
		if !live[uid] {
			delete(r.badShareMax, uid)
		}
	}
}
