package sched

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

func claimReservedFor(name string, pods ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: testDriver, Pool: "n", Device: "gpu-0"}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p)})
	}
	return c
}

func podUsing(name string, claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
	for _, c := range claims {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: c, ResourceClaimName: ptr.To(c)})
	}
	return p
}

// TestClaimReleaser: a victim's own claim is deallocated once it is gone; a
// claim it shares keeps its allocation for the pod that stays, without the
// victim; a pod that is no victim releases nothing.
func TestClaimReleaser(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(claimReservedFor("own", "v"), claimReservedFor("shared", "v", "stay"), claimReservedFor("other", "x"))
	// The preemptor is activated once the victim's claims are released.
	var act lockedActivator
	releasedFirst := make(chan bool, 1)
	r := newClaimReleaser(cs, activatorFunc(func(pods map[string]*corev1.Pod) {
		c, err := cs.ResourceV1().ResourceClaims("ns").Get(ctx, "own", metav1.GetOptions{})
		released := err == nil && c.Status.Allocation == nil
		act.Activate(klog.Background(), pods)
		releasedFirst <- released // after Activate: the test reads act once this arrives
	}), time.Minute)
	r.expect(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hi"}}, []string{"v"})
	r.gone(ctx, podUsing("x", "other")) // not a victim
	r.gone(ctx, podUsing("v", "own", "shared"))
	get := func(name string) *resourceapi.ResourceClaim {
		c, err := cs.ResourceV1().ResourceClaims("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	deadline := time.Now().Add(10 * time.Second)
	for get("own").Status.Allocation != nil || len(get("shared").Status.ReservedFor) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("victim's claims not released: own %+v, shared %+v", get("own").Status, get("shared").Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c := get("own"); len(c.Status.ReservedFor) != 0 {
		t.Fatalf("own claim still reserved: %+v", c.Status.ReservedFor)
	}
	if c := get("shared"); c.Status.Allocation == nil || c.Status.ReservedFor[0].UID != "stay" {
		t.Fatalf("shared claim: %+v", c.Status)
	}
	if c := get("other"); c.Status.Allocation == nil || len(c.Status.ReservedFor) != 1 {
		t.Fatalf("a pod that is no victim had its claim released: %+v", c.Status)
	}
	select {
	case ok := <-releasedFirst:
		if !ok {
			t.Fatal("the preemptor was activated before its victim's claim was deallocated")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the preemptor was not activated")
	}
	if got := act.take(); !slices.Equal(got, []string{"ns/hi"}) {
		t.Fatalf("activated %v, want [ns/hi]", got)
	}
	if _, ok := r.take("v"); ok {
		t.Fatal("victim still expected after it was gone")
	}
}

// activatorFunc is a fwk.PodActivator calling f.
type activatorFunc func(map[string]*corev1.Pod)

func (f activatorFunc) Activate(_ klog.Logger, pods map[string]*corev1.Pod) { f(pods) }

// TestClaimReleaserCached: a release starts from the claim tracker's copy
// (no read from the API server when it names the victim); a copy that does
// not name the victim (stale), or none, is read from the API server
// instead; every victim's claim ends deallocated. The tracker is given the
// claim as written before the preemptor is activated (its next try must
// find the share free there, not wait for the informer) when the claim is
// the victim's own (controlled by it: made from its template, or for its
// extended resources); a named claim (no owner, or another one), which
// other pods may share and other cycles assume, is left to the informer.
func TestClaimReleaserCached(t *testing.T) {
	ctx := context.Background()
	fresh := func(api *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) { return api, nil }
	for _, c := range []struct {
		name    string
		owner   types.UID // the claim's controller ("": none)
		cache   func(*resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error)
		gets    int
		assumed bool
	}{
		{"fresh copy", "v", fresh, 0, true},
		{"stale copy", "v", func(api *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
			s := api.DeepCopy()
			s.Status.ReservedFor = nil
			return s, nil
		}, 1, true},
		{"no copy", "v", func(*resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
			return nil, errors.New("not found")
		}, 1, true},
		{"named claim, no owner", "", fresh, 0, false},
		{"named claim of another pod", "x", fresh, 0, false},
	} {
		claim := claimReservedFor("own", "v")
		if c.owner != "" {
			claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: string(c.owner), UID: c.owner, Controller: ptr.To(true)}}
		}
		cs := fake.NewClientset(claim)
		done := make(chan struct{})
		var mu sync.Mutex
		var assumed, atActivation *resourceapi.ResourceClaim
		r := newClaimReleaser(cs, activatorFunc(func(map[string]*corev1.Pod) {
			mu.Lock()
			atActivation = assumed
			mu.Unlock()
			close(done)
		}), time.Minute)
		r.assume = func(c *resourceapi.ResourceClaim) error {
			mu.Lock()
			defer mu.Unlock()
			assumed = c
			return nil
		}
		r.cached = func(ns, name string) (*resourceapi.ResourceClaim, error) {
			api, err := cs.Tracker().Get(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), ns, name)
			if err != nil {
				return nil, err
			}
			return c.cache(api.(*resourceapi.ResourceClaim))
		}
		r.expect(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hi"}}, []string{"v"})
		r.gone(ctx, podUsing("v", "own"))
		select {
		case <-done: // activated after the release
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the preemptor was not activated", c.name)
		}
		got, err := cs.ResourceV1().ResourceClaims("ns").Get(ctx, "own", metav1.GetOptions{})
		if err != nil || got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 {
			t.Fatalf("%s: claim not deallocated: %v %+v", c.name, err, got.Status)
		}
		mu.Lock()
		switch {
		case c.assumed && (atActivation == nil || atActivation.Status.Allocation != nil):
			t.Errorf("%s: the preemptor was activated before the tracker was given the deallocated claim", c.name)
		case !c.assumed && assumed != nil:
			t.Errorf("%s: the tracker was given a claim the victim does not own", c.name)
		}
		mu.Unlock()
		gets := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "resourceclaims" {
				gets++
			}
		}
		if gets != c.gets+1 { // (+1: the check above)
			t.Errorf("%s: %d reads of the claim from the API server before the release, want %d", c.name, gets-1, c.gets)
		}
	}
}
