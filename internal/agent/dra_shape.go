package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"

	"github.com/gpuslice/gpuslice/internal/dra"
	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// ourClaim is what the container check needs of one of the node's
// gpuslice.io claims: the GPUs it holds ("<pool>/<device>"), whether it
// is for admin access and whether it holds a MIG instance.
type ourClaim struct {
	devices []string
	admin   bool
	mig     bool
}

// ourClaimOf reads an allocated claim's devices of this driver; isMIG says
// which are MIG instances (dra.Driver.IsMIG).
func ourClaimOf(c *resourceapi.ResourceClaim, isMIG func(pool, device string) bool) ourClaim {
	var o ourClaim
	if c.Status.Allocation == nil {
		return o
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != dra.DriverName {
			continue
		}
		o.devices = append(o.devices, r.Pool+"/"+r.Device)
		o.admin = o.admin || (r.AdminAccess != nil && *r.AdminAccess)
		o.mig = o.mig || isMIG(r.Pool, r.Device)
	}
	return o
}

// ourPreparedClaim reads a prepared claim's devices from the checkpoint.
func ourPreparedClaim(c checkpoint.Claim) ourClaim {
	var o ourClaim
	for _, d := range c.Devices {
		o.devices = append(o.devices, d.Pool+"/"+d.Device)
		o.admin = o.admin || d.AdminAccess
		o.mig = o.mig || d.MIG != nil
	}
	return o
}

// claimsPerContainer refuses the claims a container would hold beside other
// gpuslice.io claims of this node where they cannot each be their own group
// in it. A process holds one group per GPU (the node mounts each claim's
// group directory at its GPUs' paths, groupstate.ContainerDevicesDir), so
// claims on different GPUs are fine; refused are: two claims on one GPU (two
// shares of one GPU in one container: one would go unenforced; a larger claim
// is the way to a larger share), an admin-access claim beside another (its
// GPU would be charged to the other's group), a MIG claim beside another (a
// MIG claim sets the container's CUDA_VISIBLE_DEVICES to its instances, so
// the other claim's GPUs would be hidden), and more than
// groupstate.MaxContainerGroups claims. ours are the node's gpuslice.io
// claims by "<namespace>/<name>" (those of this Prepare and those prepared
// before); the pods are those reserving each claim, from the node's pod
// informer (a pod it has not seen yet is not checked). Returns an error per
// refused claim UID.
func claimsPerContainer(pods listersv1.PodLister, claims []*resourceapi.ResourceClaim, ours map[string]ourClaim) map[types.UID]error {
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
				bad, err := containerRefusal(p, ctr, names, ours)
				for _, n := range bad {
					if c, ok := byName[p.Namespace+"/"+n]; ok {
						out[c.UID] = err
					}
				}
			}
		}
	}
	return out
}

// containerRefusal judges one container's claims (names, sorted): the
// claims refused and why (none: nil).
func containerRefusal(p *corev1.Pod, ctr string, names []string, ours map[string]ourClaim) ([]string, error) {
	var mine []string
	byDevice := map[string][]string{}
	admin := false
	var mig []string
	for _, n := range names {
		o, ok := ours[p.Namespace+"/"+n]
		if !ok {
			continue
		}
		mine = append(mine, n)
		admin = admin || o.admin
		if o.mig {
			mig = append(mig, n)
		}
		for _, d := range o.devices {
			if !slices.Contains(byDevice[d], n) {
				byDevice[d] = append(byDevice[d], n)
			}
		}
	}
	if len(mine) < 2 {
		return nil, nil
	}
	where := fmt.Sprintf("container %s of pod %s/%s uses claims %s of gpuslice.io", ctr, p.Namespace, p.Name,
		strings.Join(mine, " and "))
	devs := slices.Sorted(maps.Keys(byDevice))
	for _, d := range devs {
		if on := byDevice[d]; len(on) > 1 {
			return on, fmt.Errorf("%s, and %s are on one GPU (%s): a GPU is one group in a container, so one "+
				"would go unenforced; give the container one claim for that GPU (a larger share) or a container "+
				"per claim", where, strings.Join(on, " and "), d)
		}
	}
	if len(mig) > 0 {
		return mine, fmt.Errorf("%s, and %s holds a MIG instance: a MIG claim sets the container's "+
			"CUDA_VISIBLE_DEVICES to its instances, which would hide the other claim's devices; give the MIG "+
			"claim a container of its own", where, strings.Join(mig, " and "))
	}
	if admin {
		return mine, fmt.Errorf("%s, one of them for admin access: its GPU would be charged to another claim's "+
			"group; give the admin-access claim a container of its own", where)
	}
	if len(mine) > groupstate.MaxContainerGroups {
		return mine, fmt.Errorf("%s: a process holds at most %d groups; give the claims more containers",
			where, groupstate.MaxContainerGroups)
	}
	return nil, nil
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
