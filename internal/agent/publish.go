package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// newPublisher measures the node's GPUNode row every cfg.PublishPeriod (and
// writes it when it changed):
// GPUs as nvml measures them (with the health monitor's verdict), holdings from the assignments of the node's
// pods, and, per GPU, the processes no pod scheduled there owns.
func newPublisher(cfg Config, gc versioned.Interface, nvml gpunoderow.NVMLReader, pods listersv1.PodLister, sh *sharing) *gpunoderow.Publisher {
	own := &owners{pods: pods, tree: group.NewTree(cfg.RunDir), procRoot: cfg.ProcRoot}
	nvml.Owned = func(index int, pid uint32) bool { return own.owned(index, pid) || sh.server(pid) }
	return &gpunoderow.Publisher{Client: gc, Node: cfg.NodeName, Clock: clock.RealClock{}, Period: cfg.PublishPeriod,
		GPUs: sharingReader{s: sh, r: ownedReader{own: own, r: nvml, runDir: cfg.RunDir}},
		Held: podHoldings{pods: pods, node: cfg.NodeName}}
}

// podHoldings adds up the assignments of the node's pods (the informer's
// view: the agent watches only its node's pods).
type podHoldings struct {
	pods listersv1.PodLister
	node string
}

func (h podHoldings) Held(ctx context.Context) (map[int32]gpunoderow.Held, error) {
	ps, err := h.pods.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	vals := make([]corev1.Pod, 0, len(ps))
	for _, p := range ps {
		if p.Spec.NodeName == h.node {
			vals = append(vals, *p)
		}
	}
	return gpunoderow.Sum(ctx, h.node, vals), nil
}

// ownedReader refreshes who owns which processes before each measurement.
type ownedReader struct {
	own    *owners
	r      gpunoderow.NVMLReader
	runDir string
}

func (o ownedReader) Devices(ctx context.Context) ([]gpunoderow.Device, error) {
	o.own.refresh(ctx)
	devs, err := o.r.Devices(ctx)
	if err != nil {
		return nil, err
	}
	addElastic(ctx, o.runDir, devs)
	return devs, nil
}

// addElastic adds the time-slice daemon's elastic memory per GPU (status.json; a
// daemon that has not written one yet adds nothing).
func addElastic(ctx context.Context, runDir string, devs []gpunoderow.Device) {
	st, err := nodestatus.Read(runDir)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("no elastic memory status", "err", err)
		return
	}
	for _, m := range st.Memory {
		for i := range devs {
			if !strings.EqualFold(devs[i].UUID, m.UUID) {
				continue
			}
			for _, g := range m.Groups {
				devs[i].MemoryGuaranteed += clampInt64(g.Guaranteed)
				devs[i].MemoryBorrowed += clampInt64(g.Borrowed)
				devs[i].MemorySpilled += clampInt64(g.Spilled)
			}
		}
	}
}

func clampInt64(v uint64) int64 { return int64(min(v, 1<<62)) }

// owners maps host pids to the GPUs their pod was assigned: the processes of
// each container's group (the group file's process table; host pids are
// filled in by the time-slice daemon for containers with a pid namespace of their
// own), else the pod whose cgroup the process is in.
type owners struct {
	pods     listersv1.PodLister
	tree     group.Tree
	procRoot string
	mu       sync.Mutex
	byPID    map[int32][]int32     // host pid -> GPU indices
	byPod    map[types.UID][]int32 // pod UID -> GPU indices
}

func (o *owners) refresh(ctx context.Context) {
	byPID, byPod := map[int32][]int32{}, map[types.UID][]int32{}
	ps, err := o.pods.List(labels.Everything())
	if err != nil {
		klog.FromContext(ctx).Error(err, "list pods for process owners")
	}
	for _, p := range ps {
		a, err := api.ParseAssignment(p.Annotations[api.AnnotationAssignment])
		if err != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range a.Containers {
			idx := make([]int32, 0, len(c.GPUs))
			for _, g := range c.GPUs {
				idx = append(idx, g.Index)
			}
			byPod[p.UID] = append(byPod[p.UID], idx...)
			name := deviceplugin.GroupName(deviceplugin.Candidate{Name: p.Name, Container: c.Name, UID: p.UID})
			procs, err := groupstate.Processes(filepath.Join(o.tree.Path(name), groupstate.FileName))
			if err != nil {
				continue // no process has attached yet (or the group is elsewhere)
			}
			for _, gp := range procs {
				if gp.HostPID > 0 {
					byPID[gp.HostPID] = append(byPID[gp.HostPID], idx...)
				}
			}
		}
	}
	o.mu.Lock()
	o.byPID, o.byPod = byPID, byPod
	o.mu.Unlock()
}

// owned tells whether host pid runs for a pod assigned GPU index.
func (o *owners) owned(index int, pid uint32) bool {
	o.mu.Lock()
	idx, ok := o.byPID[int32(pid)]
	o.mu.Unlock()
	if ok {
		return slices.Contains(idx, int32(index))
	}
	b, err := os.ReadFile(filepath.Join(o.procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return false
	}
	uid, ok := podOfCgroup(string(b))
	if !ok {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.byPod[uid], int32(index))
}

// podOfCgroup finds the pod UID in a /proc/<pid>/cgroup file: the kubelet's
// pod<uid> (cgroupfs) or kubepods-...-pod<uid_with_underscores>.slice
// (systemd) path element.
func podOfCgroup(s string) (types.UID, bool) {
	for line := range strings.SplitSeq(s, "\n") {
		_, rest, _ := strings.Cut(line, ":") // hierarchy-ID:controllers:path
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		for el := range strings.SplitSeq(path, "/") {
			el = strings.TrimSuffix(el, ".slice")
			i := strings.LastIndex(el, "pod")
			if i < 0 || (i > 0 && el[i-1] != '-') {
				continue
			}
			uid := strings.ReplaceAll(el[i+len("pod"):], "_", "-")
			if len(uid) == 36 && strings.Count(uid, "-") == 4 {
				return types.UID(uid), true
			}
		}
	}
	return "", false
}
