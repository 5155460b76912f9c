package agent

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
)

// oneClaimPerContainer refuses the claims a container would hold beside
// another gpuslice.io claim of this node: a process is in one group (its
// library maps one group state file), so of two claims in one container one
// would go unenforced, its GPU limited by the other's settings. ours are
// the node's gpuslice.io claims by "<namespace>/<name>" (those of this
// Prepare and those prepared before); the pods are those reserving each
// claim, from the node's pod informer (a pod it has not seen yet is not
// checked). Returns an error per refused claim UID.
func oneClaimPerContainer(pods listersv1.PodLister, claims []*resourceapi.ResourceClaim, ours map[string]bool) map[types.UID]error {
	out := map[types.UID]error{}
	byName := map[string]*resourceapi.ResourceClaim{}
	for _, c := range claims {
		byName[c.Namespace+"/"+c.Name] = c
	}
	seen := map[types.UID]bool{}
	for _, c := range claims {
		for _, r := range c.Status.ReservedFor {
			if r.Resource != "pods" || seen[r.UID] {
				continue
			}
			seen[r.UID] = true
			p, err := pods.Pods(c.Namespace).Get(r.Name)
			if err != nil || p.UID != r.UID {
				continue
			}
			for ctr, names := range containerClaims(p) {
				var mine []string
				for _, n := range names {
					if ours[p.Namespace+"/"+n] {
						mine = append(mine, n)
					}
				}
				if len(mine) < 2 {
					continue
				}
				err := fmt.Errorf("container %s of pod %s/%s uses claims %s of gpuslice.io: a container is one group, "+
					"so all but one would go unenforced; give it one claim (its GPUs are one group) or a container per claim",
					ctr, p.Namespace, p.Name, strings.Join(mine, " and "))
				for _, n := range mine {
					if c, ok := byName[p.Namespace+"/"+n]; ok {
						out[c.UID] = err
					}
				}
			}
		}
	}
	return out
}

// containerClaims lists each container's ResourceClaims by name (sorted,
// once each): those its resources.claims name (templates resolved through
// the pod's status) and the scheduler's claim for its extended resources.
func containerClaims(p *corev1.Pod) map[string][]string {
	real := map[string]string{}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			real[rc.Name] = *rc.ResourceClaimName
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			real[s.Name] = *s.ResourceClaimName
		}
	}
	out := map[string][]string{}
	add := func(ctr, claim string) {
		if claim != "" && !slices.Contains(out[ctr], claim) {
			out[ctr] = append(out[ctr], claim)
			slices.Sort(out[ctr])
		}
	}
	for _, c := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		for _, rc := range c.Resources.Claims {
			add(c.Name, real[rc.Name])
		}
	}
	if e := p.Status.ExtendedResourceClaimStatus; e != nil {
		for _, m := range e.RequestMappings {
			add(m.ContainerName, e.ResourceClaimName)
		}
	}
	return out
}
