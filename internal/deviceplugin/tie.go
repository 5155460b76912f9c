package deviceplugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// Errors of the tie between an allocation and an assignment. The kubelet
// fails the pod's admission with them; nothing is ever handed out on a guess.
var (
	ErrNoCandidate  = errors.New("no container of this node is waiting for gpuslice devices")
	ErrAmbiguous    = errors.New("more than one container is waiting for gpuslice devices; refusing to guess")
	ErrNoAssignment = errors.New("container has no gpuslice assignment")
	ErrMismatch     = errors.New("device IDs do not match the assignment")
)

// Candidate is a container the kubelet may be allocating devices for.
type Candidate struct {
	Namespace, Name string
	UID             types.UID
	Container       string
	// Count is the container's limit of the resource: how many device IDs
	// the kubelet asks for.
	Count int
	// GPUs is the container's part of the pod's assignment (none if the
	// pod has no valid assignment; AssignmentErr says why).
	GPUs          []api.GPUAssignment
	AssignmentErr error
	// Pod is the candidate's pod as listed (nil in tests that need none).
	Pod *corev1.Pod
}

func (c Candidate) String() string { return c.Namespace + "/" + c.Name + "/" + c.Container }

// Records are what the node knows of a container's devices.
type Records struct {
	// Held says how many device-plugin resources (any plugin's) the
	// kubelet lists devices of for the container (pod-resources), and
	// whether resource is one of them. Nil: none.
	Held func(pod *corev1.Pod, container string, resource corev1.ResourceName) (any int, this bool)
	// Made says whether an Allocate answer was made for the container
	// (its group exists). Nil: never.
	Made func(pod *corev1.Pod, container string) bool
}

// allocated says whether the container has had its devices of resource.
// Made with nothing held is a finishing pod whose devices the kubelet
// dropped (it drops all of a pod's at once, see the package comment); made
// with another resource held is a container whose resources the kubelet is
// allocating one after another (gpuslice.io/gpu beside gpuslice.io/gpu-units
// share one group), recording each as it goes.
func (r Records) allocated(pod *corev1.Pod, container string, resource corev1.ResourceName) bool {
	var n int
	if r.Held != nil {
		var this bool
		if n, this = r.Held(pod, container, resource); this {
			return true
		}
	}
	return n == 0 && r.Made != nil && r.Made(pod, container)
}

// Candidates lists, for each live pod the kubelet works on, the first
// container (spec order, the kubelet's order) that requests resource through
// this plugin and has not had its devices of it (Records). A pod with a
// status.startTime is left out: the kubelet sets it once it has admitted the
// pod, never before. So during an Allocate call this is exactly the
// container being allocated.
func Candidates(pods []*corev1.Pod, resource corev1.ResourceName, rec Records) []Candidate {
	var out []Candidate
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
			pod.Status.StartTime != nil {
			continue
		}
		for _, c := range pod.Spec.Containers {
			q, ok := c.Resources.Limits[resource]
			if !ok || q.Value() <= 0 || viaDRA(pod, c.Name, resource) || rec.allocated(pod, c.Name, resource) {
				continue
			}
			cand := Candidate{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Container: c.Name, Count: int(q.Value()), Pod: pod}
			cand.GPUs, cand.AssignmentErr = assignedGPUs(pod, c.Name)
			out = append(out, cand)
			break
		}
	}
	return out
}

// viaDRA says whether the scheduler gave the container's resource through a
// DRA claim (a device class's extendedResourceName): the kubelet then
// never calls the plugin for it.
func viaDRA(pod *corev1.Pod, container string, resource corev1.ResourceName) bool {
	if pod.Status.ExtendedResourceClaimStatus == nil {
		return false
	}
	for _, m := range pod.Status.ExtendedResourceClaimStatus.RequestMappings {
		if m.ContainerName == container && m.ResourceName == string(resource) {
			return true
		}
	}
	return false
}

func assignedGPUs(pod *corev1.Pod, container string) ([]api.GPUAssignment, error) {
	s, ok := pod.Annotations[api.AnnotationAssignment]
	if !ok {
		return nil, fmt.Errorf("%w: pod has no %s annotation", ErrNoAssignment, api.AnnotationAssignment)
	}
	a, err := api.ParseAssignment(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoAssignment, err)
	}
	if pod.Spec.NodeName != "" && a.Node != pod.Spec.NodeName {
		return nil, fmt.Errorf("%w: assignment is for node %q, pod is on %q", ErrNoAssignment, a.Node, pod.Spec.NodeName)
	}
	for _, c := range a.Containers {
		if c.Name == container {
			return c.GPUs, nil
		}
	}
	return nil, fmt.Errorf("%w: the assignment does not name container %q", ErrNoAssignment, container)
}

// Resolve picks the container an allocation of size device IDs is for: the
// only candidate asking for that many, with an assignment of that many GPUs.
func Resolve(cands []Candidate, size int) (Candidate, error) {
	c, err := resolveOne(cands, size)
	if err != nil {
		return c, err
	}
	if len(c.GPUs) != size {
		return c, fmt.Errorf("%s: %w: the assignment has %d GPUs, the container requests %d devices", c, ErrMismatch, len(c.GPUs), size)
	}
	return c, nil
}

// resolveOne picks the only candidate asking for size devices, with a valid
// assignment.
func resolveOne(cands []Candidate, size int) (Candidate, error) {
	var match []Candidate
	for _, c := range cands {
		if c.Count == size {
			match = append(match, c)
		}
	}
	switch {
	case len(match) == 0:
		return Candidate{}, fmt.Errorf("%w (size %d, %d other candidates)", ErrNoCandidate, size, len(cands))
	case len(match) > 1:
		names := make([]string, len(match))
		for i, c := range match {
			names[i] = c.String()
		}
		return Candidate{}, fmt.Errorf("%w: %s", ErrAmbiguous, strings.Join(names, ", "))
	}
	c := match[0]
	if c.AssignmentErr != nil {
		return c, fmt.Errorf("%s: %w", c, c.AssignmentErr)
	}
	return c, nil
}

// Prefer chooses one slot on each GPU assigned to c: a must-include slot of
// that GPU if there is one, else its lowest available slot.
func Prefer(c Candidate, available, mustInclude []string) ([]string, error) {
	free := map[string][]int{}
	for _, id := range available {
		uuid, k, err := ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		free[uuid] = append(free[uuid], k)
	}
	must := map[string]string{}
	for _, id := range mustInclude {
		uuid, _, err := ParseSlotID(id)
		if err != nil {
			return nil, err
		}
		must[uuid] = id
	}
	out := make([]string, 0, len(c.GPUs))
	for _, g := range c.GPUs {
		if id, ok := must[g.UUID]; ok {
			out = append(out, id)
			continue
		}
		ks := free[g.UUID]
		if len(ks) == 0 {
			return nil, fmt.Errorf("%s: %w: no free slot on assigned GPU %d (%s)", c, ErrMismatch, g.Index, g.UUID)
		}
		out = append(out, SlotID(g.UUID, slices.Min(ks)))
	}
	return out, nil
}

// Tie checks that ids (the kubelet's allocation) hold exactly one slot on
// each GPU assigned to c and nothing else.
func Tie(c Candidate, ids []string) error {
	got := make([]string, 0, len(ids))
	for _, id := range ids {
		uuid, _, err := ParseSlotID(id)
		if err != nil {
			return err
		}
		got = append(got, uuid)
	}
	want := make([]string, 0, len(c.GPUs))
	for _, g := range c.GPUs {
		want = append(want, g.UUID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: %w: kubelet gave slots on %v, assignment says %v", c, ErrMismatch, got, want)
	}
	return nil
}
