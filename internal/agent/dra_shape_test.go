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
	claim := func(name string, pods ...string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)}}
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("p-" + p)})
		}
		return c
	}
	ctr := func(name string, claims ...string) corev1.Container {
		c := corev1.Container{Name: name}
		for _, n := range claims {
			c.Resources.Claims = append(c.Resources.Claims, corev1.ResourceClaim{Name: n})
		}
		return c
	}
	pod := func(name string, rcs []corev1.PodResourceClaim, ctrs ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("p-" + name)},
			Spec: corev1.PodSpec{ResourceClaims: rcs, Containers: ctrs}}
	}
	direct := func(podClaim, claim string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: podClaim, ResourceClaimName: ptr.To(claim)}
	}
	both := pod("both", []corev1.PodResourceClaim{direct("a", "ca"), {Name: "b", ResourceClaimTemplateName: ptr.To("t")}}, ctr("main", "a", "b", "a"))
	both.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "b", ResourceClaimName: ptr.To("cb")}}
	same := pod("same", []corev1.PodResourceClaim{direct("a", "qa"), direct("b", "qb")}, ctr("main", "a", "b"))
	admin := pod("admin", []corev1.PodResourceClaim{direct("a", "ma"), direct("b", "mb")}, ctr("main", "a", "b"))
	many := pod("many", []corev1.PodResourceClaim{direct("a", "m1"), direct("b", "m2"), direct("c", "m3"), direct("d", "m4"),
		direct("e", "m5")}, ctr("main", "a", "b", "c", "d", "e"))
	split := pod("split", []corev1.PodResourceClaim{direct("a", "sa"), direct("b", "sb")}, ctr("x", "a"), ctr("y", "b"))
	shared1 := pod("s1", []corev1.PodResourceClaim{direct("g", "shared")}, ctr("main", "g"))
	shared2 := pod("s2", []corev1.PodResourceClaim{direct("g", "shared")}, ctr("main", "g"))
	other := pod("other", []corev1.PodResourceClaim{direct("g", "og"), direct("n", "nic")}, ctr("main", "g", "n"))
	ext := pod("ext", []corev1.PodResourceClaim{direct("g", "eg")}, ctr("main", "g"))
	ext.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "ext-claim",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: "gpuslice.io/gpu", RequestName: "container-0-request-0"}}}
	migPod := pod("mig", []corev1.PodResourceClaim{direct("m", "xm"), direct("g", "xg")}, ctr("main", "m", "g"))
	migAlone := pod("migalone", []corev1.PodResourceClaim{direct("m", "ym"), direct("g", "yg")}, ctr("x", "m"), ctr("y", "g"))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{both, same, admin, many, split, shared1, shared2, other, ext, migPod, migAlone} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	lister := listersv1.NewPodLister(idx)
	claims := []*resourceapi.ResourceClaim{claim("ca", "both"), claim("cb", "both"), claim("qa", "same"), claim("qb", "same"),
		claim("ma", "admin"), claim("mb", "admin"), claim("m1", "many"), claim("m2", "many"), claim("m3", "many"),
		claim("m4", "many"), claim("m5", "many"), claim("sa", "split"), claim("sb", "split"),
		claim("shared", "s1", "s2"), claim("og", "other"), claim("eg", "ext"), claim("unseen", "nobody"),
		claim("xm", "mig"), claim("xg", "mig"), claim("ym", "migalone"), claim("yg", "migalone")}
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
	got := claimsPerContainer(lister, claims, ours)
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
