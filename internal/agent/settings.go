package agent

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/slice"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// groupSettings is what the node group of a container holding gpus (its
// part of the pod's assignment) is set to: the memory limit (smallest
// per-GPU memory share, as GPUSLICE_MEMORY_LIMIT), a share of each GPU's time of units percent (none
// for a whole GPU), and the pod's priority and slice (api.ParseSlicing; the
// slice only without units: a group has a share or a slice).
func groupSettings(pod *corev1.Pod, gpus []api.GPUAssignment) (group.Settings, error) {
	var s group.Settings
	sl, err := api.ParseSlicing(pod)
	if err != nil {
		return s, err
	}
	if s.Priority, err = slice.ParsePriority(sl.Priority); err != nil {
		return s, fmt.Errorf("%w: %w", api.ErrInvalidSlicing, err)
	}
	var units int64
	for _, g := range gpus {
		if g.MemoryBytes > 0 && (s.MemoryMax == 0 || uint64(g.MemoryBytes) < s.MemoryMax) {
			s.MemoryMax = uint64(g.MemoryBytes)
		}
		if g.Units > 0 && !g.Exclusive && (units == 0 || g.Units < units) {
			units = g.Units
		}
	}
	switch {
	case units > 0:
		s.Share = float64(min(units, api.DefaultUnitsPerGPU)) / api.DefaultUnitsPerGPU
	default:
		s.Slice = sl.Slice
	}
	if err := s.Validate(); err != nil {
		return group.Settings{}, err
	}
	return s, nil
}

// applySettings makes the groups of pod's containers (those Allocate made)
// match their settings; a group already right is not rewritten, so the node
// daemon sees a change only when there is one.
func applySettings(ctx context.Context, tree group.Tree, pod *corev1.Pod, want map[string][]api.GPUAssignment) error {
	for _, c := range pod.Spec.Containers {
		gpus, ok := want[c.Name]
		if !ok {
			continue
		}
		name := deviceplugin.GroupName(deviceplugin.Candidate{Name: pod.Name, Container: c.Name, UID: pod.UID})
		if !tree.Exists(name) {
			continue
		}
		s, err := groupSettings(pod, gpus)
		if err != nil {
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
		if cur, err := tree.Read(name); err == nil && cur == s {
			continue
		}
		if err := tree.Write(name, s); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("applied group settings", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name,
			"group", name, "share", s.Share, "priority", s.Priority.String(), "memoryMax", s.MemoryMax)
	}
	return nil
}
