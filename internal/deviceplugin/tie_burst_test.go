package deviceplugin

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the node's records say of a pod admitted earlier in a burst.
type earlier int

const (
	holds        earlier = iota // the kubelet lists its devices
	finishing                   // devices dropped while briefly inactive; its group exists; no startTime in the API yet
	finishedSeen                // devices dropped; its group gone; the API shows its startTime
	unrecorded                  // devices dropped, no group, no startTime: nothing says it was admitted
)

// burstNode is the kubelet and the agent's records during a burst: pods
// admitted one at a time in creation order (HandlePodAdditions), each listed
// from the moment its admission starts.
type burstNode struct {
	pods  []*corev1.Pod
	state map[string]earlier // pods admitted so far
}

func (b *burstNode) records() Records {
	return Records{
		Held: func(p *corev1.Pod, _ string, _ corev1.ResourceName) (int, bool) {
			if s, ok := b.state[p.Name]; ok && s == holds {
				return 1, true
			}
			return 0, false
		},
		Made: func(p *corev1.Pod, _ string) bool {
			s, ok := b.state[p.Name]
			return ok && (s == holds || s == finishing)
		},
	}
}

// admitting returns the candidates while pod k is admitted: pods 0..k
// listed (later ones not yet in the kubelet's pod manager, unless listAll).
func (b *burstNode) admitting(k int, listAll bool) []Candidate {
	listed := b.pods[:k+1]
	if listAll {
		listed = b.pods
	}
	return Candidates(listed, res, b.records())
}

func (b *burstNode) admitted(name string, s earlier) {
	b.state[name] = s
	if s == finishedSeen {
		for _, p := range b.pods {
			if p.Name == name {
				p.Status.StartTime = &metav1.Time{}
			}
		}
	}
}

// burstPods makes n pods; pod i asks sizes[i % len(sizes)] devices on GPUs
// of its own (i, i+1, ... mod 4), so that no two are interchangeable unless
// their GPUs coincide.
func burstPods(n int, sizes ...int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		size := sizes[i%len(sizes)]
		var gpus []int32
		for g := range size {
			gpus = append(gpus, int32((i+g)%4))
		}
		out = append(out, pod(fmt.Sprintf("p%02d", i), []int64{int64(size)}, [][]int32{gpus}))
	}
	return out
}

// TestResolveBurst: bursts of 2..20 pods admitted one at a time while the
// pods admitted before them hold their devices or are finishing (the kubelet
// dropped their devices and lists them again): every allocation resolves to
// the pod being admitted, never another; where nothing records that an
// earlier pod was admitted, or every pod of the burst is listed at once, it
// is refused (ErrAmbiguous), never guessed.
func TestResolveBurst(t *testing.T) {
	cases := []struct {
		name    string
		sizes   []int
		earlier func(i int) earlier // state of pod i once admitted
		listAll bool
		refused func(k, n int) bool // pod k of n is refused (ErrAmbiguous); nil: none
	}{
		{"same size, earlier hold", []int{1}, func(int) earlier { return holds }, false, nil},
		{"same size, earlier finishing", []int{1}, func(int) earlier { return finishing }, false, nil},
		{"same size, every other finishing", []int{2}, func(i int) earlier { return earlier(i % 2) }, false, nil},
		{"same size, finished, group gone, start time seen", []int{1}, func(int) earlier { return finishedSeen }, false, nil},
		{"mixed sizes, finishing", []int{1, 2, 3}, func(int) earlier { return finishing }, false, nil},
		{"same size, earlier pods unrecorded", []int{1}, func(int) earlier { return unrecorded }, false,
			func(k, _ int) bool { return k > 0 }},
		{"same size, all listed before admission", []int{1}, func(int) earlier { return holds }, true,
			func(k, n int) bool { return k < n-1 }},
	}
	for _, tc := range cases {
		for n := 2; n <= 20; n++ {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				b := &burstNode{pods: burstPods(n, tc.sizes...), state: map[string]earlier{}}
				for k, p := range b.pods {
					q := p.Spec.Containers[0].Resources.Limits[res]
					size := int(q.Value())
					got, err := Resolve(b.admitting(k, tc.listAll), size)
					switch {
					case tc.refused != nil && tc.refused(k, n):
						if !errors.Is(err, ErrAmbiguous) {
							t.Fatalf("pod %d: got %s, %v; want ErrAmbiguous", k, got, err)
						}
					case err != nil:
						t.Fatalf("pod %d: %v", k, err)
					case got.UID != p.UID:
						t.Fatalf("pod %d: allocation tied to %s", k, got)
					default:
						if err := Tie(got, slotsOn(got)); err != nil {
							t.Fatalf("pod %d: its own GPUs refused: %v", k, err)
						}
					}
					b.admitted(p.Name, tc.earlier(k))
				}
			})
		}
	}
}

func slotsOn(c Candidate) []string {
	var ids []string
	for _, g := range c.GPUs {
		ids = append(ids, SlotID(g.UUID, 0))
	}
	return ids
}

// TestResolveBurstEdges: a pod deleted mid-burst is refused, not replaced by
// a finishing one, and the pods after it resolve to themselves; a candidate
// holding devices is no candidate; a container's second resource after its
// first (one group for both) is; pods of one size on different GPUs are not
// interchangeable: each is tied to its own GPUs only.
func TestResolveBurstEdges(t *testing.T) {
	b := &burstNode{pods: burstPods(6, 1), state: map[string]earlier{}}
	b.admitted("p00", finishing)
	b.admitted("p01", holds)
	b.pods[2].DeletionTimestamp = &metav1.Time{}
	if got, err := Resolve(b.admitting(2, false), 1); !errors.Is(err, ErrNoCandidate) {
		t.Fatalf("deleted pod p02 being admitted beside finishing p00: got %s, %v; want ErrNoCandidate", got, err)
	}
	b.pods = append(b.pods[:2], b.pods[3:]...) // gone from the API: the agent skips it
	for k := 2; k < len(b.pods); k++ {
		got, err := Resolve(b.admitting(k, false), 1)
		if err != nil || got.UID != b.pods[k].UID {
			t.Fatalf("after the deletion, admitting %s: got %s, %v", b.pods[k].Name, got, err)
		}
		b.admitted(b.pods[k].Name, finishing)
	}

	// Holding devices: never a candidate, whatever else is known.
	h := pod("h", []int64{1}, [][]int32{{0}})
	heldOnly := Records{Held: func(*corev1.Pod, string, corev1.ResourceName) (int, bool) { return 1, true }}
	if got := Candidates([]*corev1.Pod{h}, res, heldOnly); len(got) != 0 {
		t.Fatalf("a container holding devices is a candidate: %v", got)
	}
	// Its other resource held and its group made: the kubelet is allocating
	// this container's second resource.
	second := Records{
		Held: func(*corev1.Pod, string, corev1.ResourceName) (int, bool) { return 1, false },
		Made: func(*corev1.Pod, string) bool { return true },
	}
	if got := Candidates([]*corev1.Pod{h}, res, second); len(got) != 1 || got[0].UID != h.UID {
		t.Fatalf("second resource of a container: candidates %v", got)
	}
	// Given to the scheduler's DRA claim (extendedResourceName): the kubelet never asks.
	h.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{RequestMappings: []corev1.ContainerExtendedResourceRequest{
		{ContainerName: "c0", ResourceName: string(res), RequestName: "r0"}}}
	if got := Candidates([]*corev1.Pod{h}, res, Records{}); len(got) != 0 {
		t.Fatalf("a container whose resource is a DRA claim's is a candidate: %v", got)
	}

	// Same size, different GPUs: each tie holds for its own GPUs only.
	x, y := pod("x", []int64{1}, [][]int32{{0}}), pod("y", []int64{1}, [][]int32{{3}})
	cx, err := Resolve(Candidates([]*corev1.Pod{x}, res, Records{}), 1)
	if err != nil {
		t.Fatal(err)
	}
	cy, err := Resolve(Candidates([]*corev1.Pod{y}, res, Records{}), 1)
	if err != nil {
		t.Fatal(err)
	}
	if Tie(cx, slotsOn(cx)) != nil || Tie(cy, slotsOn(cy)) != nil {
		t.Fatal("own GPUs refused")
	}
	if err := Tie(cx, slotsOn(cy)); !errors.Is(err, ErrMismatch) {
		t.Fatalf("x tied to y's GPU: %v", err)
	}
}
