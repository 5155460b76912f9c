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
)

// TestOneClaimPerContainer: a container holding two gpuslice.io claims of
// the node (named directly, from templates, one prepared before, or the
// scheduler's extended-resource claim) has both refused, naming them; claims
// in separate containers, a claim shared by pods, a container's second claim
// of another driver, and a pod the informer has not seen are not.
func TestOneClaimPerContainer(t *testing.T) {
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
	split := pod("split", []corev1.PodResourceClaim{direct("a", "sa"), direct("b", "sb")}, ctr("x", "a"), ctr("y", "b"))
	shared1 := pod("s1", []corev1.PodResourceClaim{direct("g", "shared")}, ctr("main", "g"))
	shared2 := pod("s2", []corev1.PodResourceClaim{direct("g", "shared")}, ctr("main", "g"))
	other := pod("other", []corev1.PodResourceClaim{direct("g", "og"), direct("n", "nic")}, ctr("main", "g", "n"))
	ext := pod("ext", []corev1.PodResourceClaim{direct("g", "eg")}, ctr("main", "g"))
	ext.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "ext-claim",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: "gpuslice.io/gpu", RequestName: "container-0-request-0"}}}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{both, split, shared1, shared2, other, ext} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	lister := listersv1.NewPodLister(idx)
	claims := []*resourceapi.ResourceClaim{claim("ca", "both"), claim("cb", "both"), claim("sa", "split"), claim("sb", "split"),
		claim("shared", "s1", "s2"), claim("og", "other"), claim("eg", "ext"), claim("unseen", "nobody")}
	ours := map[string]bool{"ns/ext-claim": true} // prepared before
	for _, c := range claims {
		ours[c.Namespace+"/"+c.Name] = true
	}
	got := oneClaimPerContainer(lister, claims, ours)
	want := []types.UID{"u-ca", "u-cb", "u-eg"}
	if len(got) != len(want) {
		t.Fatalf("refused %v, want %v", got, want)
	}
	for _, uid := range want {
		if got[uid] == nil {
			t.Fatalf("%s not refused: %v", uid, got)
		}
	}
	if msg := got["u-ca"].Error(); !strings.Contains(msg, "container main of pod ns/both uses claims ca and cb of gpuslice.io") {
		t.Errorf("refusal: %s", msg)
	}
	if msg := got["u-eg"].Error(); !strings.Contains(msg, "claims eg and ext-claim") {
		t.Errorf("refusal: %s", msg)
	}
}
