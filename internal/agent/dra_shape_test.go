package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
)

// TestClaimsPerContainer: a container holding several gpuslice.io claims of
// the node (named directly, from templates, one prepared before, or the
// scheduler's extended-resource claim) is refused where two of them are on one
// GPU, one is for admin access, or they are more than a process's groups,
// naming them; claims on different GPUs in one container (each its own group
// there), claims in separate containers, a claim shared by pods, a
// container's second claim of another driver, and a pod the informer has not
// seen are not.
func TestClaimsPerContainer(t *testing.T) {
	claims, ours := shapeClaims()
	got := claimsPerContainer(shapePods(t), claims, ours)
	want := []types.UID{"u-qa", "u-qb", "u-ma", "u-mb", "u-m1", "u-m2", "u-m3", "u-m4", "u-m5", "u-eg", "u-xm", "u-xg"}
	if len(got) != len(want) {
		t.Fatalf("refused %v, want %v", got, want)
	}
	for _, uid := range want {
		if got[uid] == nil {
			t.Fatalf("%s not refused: %v", uid, got)
		}
	}
	for uid, frag := range map[types.UID]string{
		"u-qa": "container main of pod ns/same uses claims qa and qb of gpuslice.io, and qa and qb are on one GPU (node/gpu-2)",
		"u-eg": "eg and ext-claim are on one GPU (node/gpu-3)",
		"u-mb": "one of them for admin access",
		"u-m5": "a process holds at most 4 groups",
		"u-xg": "container main of pod ns/mig uses claims xg and xm of gpuslice.io, and xm holds a MIG instance",
	} {
		if msg := got[uid].Error(); !strings.Contains(msg, frag) {
			t.Errorf("refusal of %s: %s, want %q", uid, msg, frag)
		}
	}
}

// shapePods lists TestClaimsPerContainer's pods: both (a claim named and
// one from a template in one container), same (two claims on one GPU), admin,
// many (five claims), split (two containers), s1 and s2 (a shared claim),
// other (a second driver's claim), ext (the scheduler's extended-resource
// claim beside its own), mig and migalone (a MIG claim with another, in one
// container and in two).
func shapePods(t *testing.T) listersv1.PodLister {
	t.Helper()
	both := shapePod("both", []corev1.PodResourceClaim{shapeDirect("a", "ca"), {Name: "b", ResourceClaimTemplateName: ptr.To("t")}}, shapeCtr("main", "a", "b", "a"))
	both.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "b", ResourceClaimName: ptr.To("cb")}}
	same := shapePod("same", []corev1.PodResourceClaim{shapeDirect("a", "qa"), shapeDirect("b", "qb")}, shapeCtr("main", "a", "b"))
	admin := shapePod("admin", []corev1.PodResourceClaim{shapeDirect("a", "ma"), shapeDirect("b", "mb")}, shapeCtr("main", "a", "b"))
	many := shapePod("many", []corev1.PodResourceClaim{shapeDirect("a", "m1"), shapeDirect("b", "m2"), shapeDirect("c", "m3"),
		shapeDirect("d", "m4"), shapeDirect("e", "m5")}, shapeCtr("main", "a", "b", "c", "d", "e"))
	split := shapePod("split", []corev1.PodResourceClaim{shapeDirect("a", "sa"), shapeDirect("b", "sb")}, shapeCtr("x", "a"), shapeCtr("y", "b"))
	shared1 := shapePod("s1", []corev1.PodResourceClaim{shapeDirect("g", "shared")}, shapeCtr("main", "g"))
	shared2 := shapePod("s2", []corev1.PodResourceClaim{shapeDirect("g", "shared")}, shapeCtr("main", "g"))
	other := shapePod("other", []corev1.PodResourceClaim{shapeDirect("g", "og"), shapeDirect("n", "nic")}, shapeCtr("main", "g", "n"))
	ext := shapePod("ext", []corev1.PodResourceClaim{shapeDirect("g", "eg")}, shapeCtr("main", "g"))
	ext.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "ext-claim",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: "gpuslice.io/gpu", RequestName: "container-0-request-0"}}}
	migPod := shapePod("mig", []corev1.PodResourceClaim{shapeDirect("m", "xm"), shapeDirect("g", "xg")}, shapeCtr("main", "m", "g"))
	migAlone := shapePod("migalone", []corev1.PodResourceClaim{shapeDirect("m", "ym"), shapeDirect("g", "yg")}, shapeCtr("x", "m"), shapeCtr("y", "g"))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{both, same, admin, many, split, shared1, shared2, other, ext, migPod, migAlone} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return listersv1.NewPodLister(idx)
}

// shapeClaims is TestClaimsPerContainer's claims, reserved for shapePods'
// pods, and which of them are the driver's, on which GPU (one for admin
// access, two MIG instances); a claim not placed is on gpu-0.
func shapeClaims() ([]*resourceapi.ResourceClaim, map[string]ourClaim) {
	claims := []*resourceapi.ResourceClaim{shapeClaim("ca", "both"), shapeClaim("cb", "both"), shapeClaim("qa", "same"), shapeClaim("qb", "same"),
		shapeClaim("ma", "admin"), shapeClaim("mb", "admin"), shapeClaim("m1", "many"), shapeClaim("m2", "many"), shapeClaim("m3", "many"),
		shapeClaim("m4", "many"), shapeClaim("m5", "many"), shapeClaim("sa", "split"), shapeClaim("sb", "split"),
		shapeClaim("shared", "s1", "s2"), shapeClaim("og", "other"), shapeClaim("eg", "ext"), shapeClaim("unseen", "nobody"),
		shapeClaim("xm", "mig"), shapeClaim("xg", "mig"), shapeClaim("ym", "migalone"), shapeClaim("yg", "migalone")}
	gpu := map[string]string{"ca": "gpu-0", "cb": "gpu-1", "qa": "gpu-2", "qb": "gpu-2", "ma": "gpu-0", "mb": "gpu-1",
		"sa": "gpu-0", "sb": "gpu-0", "eg": "gpu-3", "ext-claim": "gpu-3", "m1": "gpu-0", "m2": "gpu-1", "m3": "gpu-2",
		"m4": "gpu-3", "m5": "gpu-4", "xm": "gpu-0-mig-1g.20gb-0", "xg": "gpu-1", "ym": "gpu-0-mig-1g.20gb-0", "yg": "gpu-1"}
	ours := map[string]ourClaim{}
	for name, g := range gpu {
		ours["ns/"+name] = ourClaim{devices: []string{"node/" + g}, admin: name == "mb", mig: name == "xm" || name == "ym"}
	}
	for _, c := range claims {
		if _, ok := ours[c.Namespace+"/"+c.Name]; !ok {
			ours[c.Namespace+"/"+c.Name] = ourClaim{devices: []string{"node/gpu-0"}}
		}
	}
	return claims, ours
}

// shapeClaim is claim ns/name reserved for pods (UIDs "u-<name>", "p-<pod>").
func shapeClaim(name string, pods ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("p-" + p)})
	}
	return c
}

// shapeCtr is a container using the pod's claims named.
func shapeCtr(name string, claims ...string) corev1.Container {
	c := corev1.Container{Name: name}
	for _, n := range claims {
		c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: n})
	}
	return c
}

// shapePod is pod ns/name (UID "p-<name>") with its claims and containers.
func shapePod(name string, rcs []corev1.PodResourceClaim, ctrs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("p-" + name)},
		Spec: corev1.PodSpec{ResourceClaims: rcs, Containers: ctrs}}
}

// shapeDirect is a pod's claim podClaim naming ResourceClaim claim.
func shapeDirect(podClaim, claim string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: podClaim, ResourceClaimName: ptr.To(claim)}
}

// TestOurClaimMIG: a claim is a MIG claim where one of its devices of this
// driver is a MIG instance (allocated: as the driver says; prepared: as the
// checkpoint records).
func TestOurClaimMIG(t *testing.T) {
	isMIG := func(pool, device string) bool { return pool == "node" && device == "gpu-0-mig-1g.20gb-0" }
	alloc := func(devs ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{}
		c.Status.Allocation = &resourceapi.AllocationResult{}
		for _, d := range devs {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Driver: "gpuslice.io", Pool: "node", Device: d})
		}
		return c
	}
	for _, c := range []struct {
		devs []string
		want bool
	}{{[]string{"gpu-1"}, false}, {[]string{"gpu-1", "gpu-0-mig-1g.20gb-0"}, true}, {nil, false}} {
		if got := ourClaimOf(alloc(c.devs...), isMIG).mig; got != c.want {
			t.Errorf("allocated %v: mig %v, want %v", c.devs, got, c.want)
		}
	}
	prep := checkpoint.Claim{Devices: []checkpoint.Device{{Pool: "node", Device: "gpu-1"}}}
	if ourPreparedClaim(prep).mig {
		t.Error("prepared whole GPU read as MIG")
	}
	prep.Devices = append(prep.Devices, checkpoint.Device{Pool: "node", Device: "x", MIG: &checkpoint.MIG{}})
	if !ourPreparedClaim(prep).mig {
		t.Error("prepared MIG instance not read as MIG")
	}
}
