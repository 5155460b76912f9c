package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpurequest"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// unitsTotal returns a GPU's logical units by UUID (api.DefaultUnitsPerGPU
// on a time-slice GPU; an MPS GPU's M x N x K).
type unitsTotal func(uuid string) int64

// ContainerSettings is what the time-slice group of a container holding gpus (its
// part of the pod's assignment) is set to: the pod's request (gpuRequest)
// translated by gpurequest.
func ContainerSettings(pod *corev1.Pod, gpus []api.GPUAssignment, total func(uuid string) int64) (group.Settings, error) {
	r, err := gpuRequest(pod, gpus, total)
	if err != nil {
		return group.Settings{}, err
	}
	s, err := r.Settings()
	if errors.Is(err, gpurequest.ErrCeilingBelowGuarantee) {
		return group.Settings{}, fmt.Errorf("%w: %s below the container's %s: %w", api.ErrInvalidElastic,
			api.AnnotationMemoryMax, api.ResourceMemory, err)
	}
	return s, err
}

// gpuRequest reads a container's request: its part of each GPU of the
// assignment (units of the GPU's units total, total; nil:
// api.DefaultUnitsPerGPU; a whole GPU has no units), and the pod's
// annotations (api.ParseSlicing, api.ParseElastic, api.ParseShareMax). They
// are pod-wide: the slice is for containers without units (gpurequest uses
// it only there), the memory ceiling for those with a memory request (it is
// read into their requests only); a malformed share ceiling is left out here
// (applySettings reports it).
func gpuRequest(pod *corev1.Pod, gpus []api.GPUAssignment, total func(uuid string) int64) (gpurequest.Request, error) {
	var r gpurequest.Request
	sl, err := api.ParseSlicing(pod)
	if err != nil {
		return r, err
	}
	if _, err := policy.ParsePriority(sl.Priority); err != nil {
		return r, fmt.Errorf("%w: %w", api.ErrInvalidSlicing, err)
	}
	e, err := api.ParseElastic(pod)
	if err != nil {
		return r, err
	}
	r.Priority, r.Slice = sl.Priority, sl.Slice
	r.ShareMax, _ = api.ParseShareMax(pod)
	if slices.ContainsFunc(gpus, func(g api.GPUAssignment) bool { return g.MemoryBytes > 0 }) {
		r.MemoryCeiling, r.Spill = e.Max, e.Spill
	}
	for _, g := range gpus {
		part := gpurequest.GPU{Memory: uint64(max(g.MemoryBytes, 0)), Total: api.DefaultUnitsPerGPU}
		if total != nil {
			if t := total(g.UUID); t > 0 {
				part.Total = t
			}
		}
		if !g.Exclusive {
			part.Units = g.Units
		}
		r.GPUs = append(r.GPUs, part)
	}
	return r, nil
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
		s, err := ContainerSettings(pod, gpus, total)
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
