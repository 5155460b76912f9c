package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// unitsTotal returns a GPU's logical units by UUID (api.DefaultUnitsPerGPU
// on a time-slice GPU; an MPS GPU's M x N x K).
type unitsTotal func(uuid string) int64

// groupSettings is what the time-slice group of a container holding gpus (its
// part of the pod's assignment) is set to: the memory limit (smallest
// per-GPU memory share), a share of each GPU's time of its units over that
// GPU's units total (total; nil: api.DefaultUnitsPerGPU), the smallest over
// its GPUs (none for a whole GPU), and the pod's priority and slice
// (api.ParseSlicing; the slice only without units: a group has a share or a slice).
func groupSettings(pod *corev1.Pod, gpus []api.GPUAssignment, total unitsTotal) (group.Settings, error) {
	var s group.Settings
	sl, err := api.ParseSlicing(pod)
	if err != nil {
		return s, err
	}
	if s.Priority, err = policy.ParsePriority(sl.Priority); err != nil {
		return s, fmt.Errorf("%w: %w", api.ErrInvalidSlicing, err)
	}
	var share float64
	for _, g := range gpus {
		if g.MemoryBytes > 0 && (s.MemoryMax == 0 || uint64(g.MemoryBytes) < s.MemoryMax) {
			s.MemoryMax = uint64(g.MemoryBytes)
		}
		if f := unitShare(g, total); f > 0 && (share == 0 || f < share) {
			share = f
		}
	}
	e, err := api.ParseElastic(pod)
	if err != nil {
		return s, err
	}
	if e.Max > 0 && s.MemoryMax > 0 { // elastic memory: gpu-memory is the guarantee
		if e.Max < s.MemoryMax {
			return s, fmt.Errorf("%w: %s below the container's %s", api.ErrInvalidElastic, api.AnnotationMemoryMax, api.ResourceMemory)
		}
		s.MemoryMin, s.MemoryMax, s.MemorySpill = s.MemoryMax, e.Max, e.Spill
	}
	switch {
	case share > 0:
		s.Share = share
	default:
		s.Slice = sl.Slice
	}
	if err := s.Validate(); err != nil {
		return group.Settings{}, err
	}
	return s, nil
}

// unitShare is the share of g's GPU time its units are (0: none, or a whole
// GPU), rounded as the share file holds it (to a millionth) so the settings
// read back compare equal.
func unitShare(g api.GPUAssignment, total unitsTotal) float64 {
	if g.Units <= 0 || g.Exclusive {
		return 0
	}
	n := int64(api.DefaultUnitsPerGPU)
	if total != nil {
		if t := total(g.UUID); t > 0 {
			n = t
		}
	}
	return math.Round(float64(min(g.Units, n))/float64(n)*1e6) / 1e6
}

// overLimit is told when a container's new memory limit is below what its
// group holds (current bytes on its n GPUs).
type overLimit func(pod *corev1.Pod, container string, current, limit uint64, n int)

// shareMaxTold is told at every pass whether pod's api.AnnotationShareMax is
// malformed (err, the annotation then ignored) or not (nil).
type shareMaxTold func(pod *corev1.Pod, err error)

// applySettings makes the groups of pod's containers (those Allocate made)
// match their settings; a group already right is not rewritten, so the node
// daemon sees a change only when there is one. A limit lowered below what
// the group holds is applied too (its new allocations fail until it fits;
// nothing is killed) and reported to over (may be nil). The pod's share
// ceiling (api.AnnotationShareMax) goes to every group; a malformed one is
// ignored (each group keeps the ceiling it had) and reported to told (may be nil).
func applySettings(ctx context.Context, groups *groupmgr.Manager, total unitsTotal, pod *corev1.Pod,
	want map[string][]api.GPUAssignment, over overLimit, told shareMaxTold) error {
	tree := groups.Tree()
	shareMax, smErr := api.ParseShareMax(pod)
	if told != nil {
		told(pod, smErr)
	}
	for _, c := range pod.Spec.Containers {
		gpus, ok := want[c.Name]
		if !ok {
			continue
		}
		name := deviceplugin.GroupName(deviceplugin.Candidate{Name: pod.Name, Container: c.Name, UID: pod.UID})
		if !tree.Exists(name) {
			continue
		}
		s, err := groupSettings(pod, gpus, total)
		if err != nil {
			// Bad settings change no setting, but the GPUs still follow the
			// assignment (hot add and remove do not wait for a fixed annotation).
			return errors.Join(fmt.Errorf("container %s: %w", c.Name, err), setGPUs(ctx, groups, name, gpuIDs(gpus)))
		}
		cur, err := groups.Get(name)
		switch {
		case smErr == nil:
			s.ShareMax = shareMax
		case err == nil: // a malformed ceiling changes nothing
			s.ShareMax = cur.ShareMax
		}
		r := groupmgr.Resources{Settings: s, GPUs: gpuIDs(gpus)}
		if err == nil && cur.Settings == s && slices.Equal(cur.GPUs, r.GPUs) {
			continue
		}
		if err := groups.Set(ctx, name, r); err != nil {
			return err
		}
		if lowered := s.MemoryMax > 0 && (cur.MemoryMax == 0 || s.MemoryMax < cur.MemoryMax); lowered && over != nil {
			if held, ok := groupHolds(tree, name); ok && held > s.MemoryMax*uint64(max(len(gpus), 1)) {
				over(pod, c.Name, held, s.MemoryMax, len(gpus))
			}
		}
		klog.FromContext(ctx).Info("applied group settings", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name,
			"group", name, "share", s.Share, "shareMax", s.ShareMax, "priority", s.Priority.String(), "memoryMax", s.MemoryMax,
			"gpus", r.GPUs)
	}
	return nil
}

// setGPUs sets a group's GPUs, its settings as they are, where they differ.
func setGPUs(ctx context.Context, groups *groupmgr.Manager, name string, gpus []string) error {
	cur, err := groups.Get(name)
	if err != nil {
		return err
	}
	if slices.Equal(cur.GPUs, gpus) && cur.GPUs != nil {
		return nil
	}
	return groups.Set(ctx, name, groupmgr.Resources{Settings: cur.Settings, GPUs: gpus})
}

// gpuIDs are the UUIDs of a container's part of an assignment, sorted as the
// groups manager keeps a group's GPUs (Resources.GPUs).
func gpuIDs(gpus []api.GPUAssignment) []string {
	out := make([]string, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, g.UUID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// groupHolds reads the bytes a group holds on its GPUs (memory.current,
// kept by the time-slice daemon).
func groupHolds(tree group.Tree, name string) (uint64, bool) {
	v, err := tree.ReadFile(name, group.FileMemoryCurrent)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}
