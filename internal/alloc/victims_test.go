package alloc

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// booked is a pod already on n1: its UID, GPU, units, memory (GiB) and
// priority; whole means it holds the GPU whole.
type booked struct {
	uid   string
	gpu   int32
	units int64
	mem   int64
	prio  int32
	whole bool
}

func bookAll(t *testing.T, gpus int, pods []booked) (*Books, []Victim) {
	t.Helper()
	b := NewBooks(cfg())
	setNode(b, node("n1", gpus))
	var vs []Victim
	for _, p := range pods {
		g := api.GPUAssignment{Index: p.gpu, UUID: fmt.Sprintf("GPU-n1-%d", p.gpu), Units: p.units, MemoryBytes: p.mem * gib}
		if p.whole {
			g = api.GPUAssignment{Index: p.gpu, UUID: g.UUID, Units: 100, MemoryBytes: 16 * gib, Exclusive: true}
		}
		a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1", Containers: []api.ContainerAssignment{{Name: "c", GPUs: []api.GPUAssignment{g}}}}
		if err := b.Reserve(p.uid, a); err != nil {
			t.Fatalf("book %s: %v", p.uid, err)
		}
		vs = append(vs, Victim{UID: p.uid, Priority: p.prio})
	}
	return b, vs
}

func memOnly(memGiB int64) *api.PodRequest {
	return &api.PodRequest{Containers: []api.ContainerRequest{{Name: "c", Count: 1, MemoryBytes: memGiB * gib}}}
}

func TestVictims(t *testing.T) {
	for _, tc := range victimsCases() {
		t.Run(tc.name, tc.check)
	}
}

// victimsCase is one case of TestVictims: pods booked on gpus GPUs, a
// request, and the victims wanted.
type victimsCase struct {
	name    string
	gpus    int
	pods    []booked
	req     *api.PodRequest
	want    []string // exact set, any order
	wantN   int      // or just how many, when several sets are as good
	wantErr bool
}

func victimsCases() []victimsCase {
	tens := func(gpu int32, n int, prio int32) []booked {
		var out []booked
		for i := 0; i < n; i++ {
			out = append(out, booked{uid: fmt.Sprintf("g%d-%d", gpu, i), gpu: gpu, units: 10, mem: 1, prio: prio})
		}
		return out
	}
	return []victimsCase{
		{name: "full GPU of ten 10-unit pods, 50 units asked: five", gpus: 1, pods: tens(0, 10, 0), req: share(50, 1), wantN: 5},
		{name: "one big pod beats four small", gpus: 1,
			pods: []booked{{"a", 0, 40, 1, 0, false}, {"b", 0, 10, 1, 0, false}, {"c", 0, 10, 1, 0, false}, {"d", 0, 10, 1, 0, false}, {"e", 0, 10, 1, 0, false}, {"f", 0, 20, 1, 0, false}},
			req:  share(50, 1), wantN: 2},
		{name: "exact: 40+10 (2 pods), not 20+20+10 (greedy by start order)", gpus: 1,
			pods: []booked{{"a", 0, 20, 1, 0, false}, {"b", 0, 20, 1, 0, false}, {"c", 0, 10, 1, 0, false}, {"e", 0, 10, 1, 0, false}, {"d", 0, 40, 1, 0, false}},
			req:  share(50, 1), want: []string{"a", "d"}},
		{name: "the GPU needing fewer victims", gpus: 2,
			pods: append(tens(0, 10, 0), booked{"big", 1, 60, 1, 0, false}, booked{"s1", 1, 20, 1, 0, false}, booked{"s2", 1, 20, 1, 0, false}),
			req:  share(50, 1), want: []string{"big"}},
		{name: "equal counts: the lower priority", gpus: 2,
			pods: []booked{{"hi", 0, 100, 1, 5, false}, {"lo", 1, 100, 1, 1, false}},
			req:  share(50, 1), want: []string{"lo"}},
		{name: "memory only: the largest holders of memory", gpus: 1,
			pods: []booked{{"a", 0, 0, 2, 0, false}, {"b", 0, 0, 8, 0, false}, {"c", 0, 0, 2, 0, false}, {"d", 0, 0, 4, 0, false}},
			req:  memOnly(8), want: []string{"b"}},
		{name: "whole GPU: the GPU with fewest holders", gpus: 2,
			pods: append(tens(0, 3, 0), booked{"x", 1, 30, 1, 0, false}, booked{"y", 1, 30, 1, 0, false}),
			req:  whole(1), want: []string{"x", "y"}},
		{name: "share of a GPU held whole", gpus: 1, pods: []booked{{"w", 0, 0, 0, 0, true}}, req: share(10, 1), want: []string{"w"}},
		{name: "two whole GPUs", gpus: 3,
			pods: []booked{{"a", 0, 10, 1, 0, false}, {"b", 1, 10, 1, 0, false}, {"c", 1, 10, 1, 0, false}, {"d", 2, 10, 1, 0, false}},
			req:  whole(2), want: []string{"a", "d"}},
		{name: "fits already: nobody", gpus: 1, pods: tens(0, 5, 0), req: share(50, 1), want: nil},
		{name: "not enough even with all", gpus: 1, pods: tens(0, 4, 0), req: share(100, 20), wantErr: true},
	}
}

// check books the case's pods, asks for victims and checks them: the ones
// wanted (or as many), enough for the request to fit, none superfluous.
func (tc victimsCase) check(t *testing.T) {
	b, vs := bookAll(t, tc.gpus, tc.pods)
	// fill the rest of GPU 0 so that "fits already" is the only case with room
	got, err := b.Victims("n1", tc.req, t0, nil, vs)
	if tc.wantErr {
		if !errors.Is(err, ErrNoVictims) {
			t.Fatalf("got %v, %v; want ErrNoVictims", got, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if tc.wantN > 0 {
		if len(got) != tc.wantN {
			t.Fatalf("got %d victims %v, want %d", len(got), got, tc.wantN)
		}
	} else {
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("victims %v, want %v", got, want)
		}
	}
	o := &Overlay{Removed: got}
	if err := b.CheckWith("n1", tc.req, t0, o); err != nil {
		t.Fatalf("request does not fit without the victims: %v", err)
	}
	for i := range got { // none is superfluous
		less := &Overlay{Removed: slices.Delete(slices.Clone(got), i, i+1)}
		if b.CheckWith("n1", tc.req, t0, less) == nil && tc.wantN == 0 {
			t.Fatalf("fits without evicting %s too", got[i])
		}
	}
}

// TestVictimsOnlyFromCandidates: pods not offered (higher priority, or
// protected by a PodDisruptionBudget) are never chosen; if the rest is not
// enough, the answer is ErrNoVictims.
func TestVictimsOnlyFromCandidates(t *testing.T) {
	b, vs := bookAll(t, 1, []booked{{"a", 0, 50, 1, 0, false}, {"b", 0, 30, 1, 0, false}, {"c", 0, 20, 1, 0, false}})
	got, err := b.Victims("n1", share(50, 1), t0, nil, vs[1:])
	if err != nil || len(got) != 2 {
		t.Fatalf("without a: %v, %v; want b and c", got, err)
	}
	if _, err := b.Victims("n1", share(50, 1), t0, nil, vs[2:]); !errors.Is(err, ErrNoVictims) {
		t.Fatalf("only c offered: %v, want ErrNoVictims", err)
	}
}

// TestVictimsGreedyLargeGPU: a GPU of 100 one-unit pods is searched
// greedily (no exhaustive search) and still yields the fewest for one
// dimension.
func TestVictimsGreedyLargeGPU(t *testing.T) {
	var pods []booked
	for i := 0; i < 90; i++ {
		pods = append(pods, booked{uid: fmt.Sprintf("p%d", i), units: 1})
	}
	pods = append(pods, booked{uid: "ten", units: 10})
	b, vs := bookAll(t, 1, pods)
	got, err := b.Victims("n1", share(15, 0), t0, nil, vs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 || !slices.Contains(got, "ten") {
		t.Fatalf("victims %v, want ten and five one-unit pods", got)
	}
}
