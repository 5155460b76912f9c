package deviceplugin

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func unitsCand(units int64, gpus ...int32) Candidate {
	c := Candidate{Namespace: "ns", Name: "p", Container: "main", Count: int(units)}
	for _, g := range gpus {
		c.GPUs = append(c.GPUs, api.GPUAssignment{Index: g, UUID: uuid(g), Units: units, MemoryBytes: 1 << 30})
	}
	return c
}

func unitSlots(g int32, ks ...int) []string {
	out := make([]string, 0, len(ks))
	for _, k := range ks {
		out = append(out, SlotID(uuid(g), k))
	}
	return out
}

func rangeSlots(g int32, from, to int) []string {
	var ks []int
	for k := from; k < to; k++ {
		ks = append(ks, k)
	}
	return unitSlots(g, ks...)
}

func TestResolveUnits(t *testing.T) {
	whole := unitsCand(100, 0)
	whole.GPUs[0].Exclusive = true
	other := unitsCand(25, 1)
	other.Count = 30
	cases := map[string]struct {
		cands []Candidate
		size  int
		want  error
	}{
		"one share":          {[]Candidate{unitsCand(25, 0), other}, 25, nil},
		"none of that size":  {[]Candidate{unitsCand(25, 0)}, 40, ErrNoCandidate},
		"two of that size":   {[]Candidate{unitsCand(25, 0), unitsCand(25, 1)}, 25, ErrAmbiguous},
		"booked differently": {[]Candidate{other}, 30, ErrMismatch},
		"exclusive":          {[]Candidate{whole}, 100, ErrMismatch},
		"no assignment":      {[]Candidate{{Namespace: "ns", Name: "x", Container: "c", Count: 5, AssignmentErr: ErrNoAssignment}}, 5, ErrNoAssignment},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ResolveUnits(tc.cands, tc.size)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPreferAndTieUnits(t *testing.T) {
	avail := append(rangeSlots(0, 40, 100), rangeSlots(1, 0, 100)...)
	c := unitsCand(25, 0)
	ids, err := PreferUnits(c, avail, nil, 25)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, rangeSlots(0, 40, 65)) {
		t.Fatalf("preferred %v", ids)
	}
	if err := TieUnits(c, ids); err != nil {
		t.Fatal(err)
	}
	// Must-include slots first (the kubelet re-allocating after a restart).
	ids, err = PreferUnits(c, avail, unitSlots(0, 99), 25)
	if err != nil || ids[0] != SlotID(uuid(0), 99) || len(ids) != 25 {
		t.Fatalf("preferred %v, %v", ids, err)
	}
	// Only 20 free on the assigned GPU: refused, never slots elsewhere.
	if _, err := PreferUnits(c, append(rangeSlots(0, 80, 100), rangeSlots(1, 0, 100)...), nil, 25); !errors.Is(err, ErrMismatch) {
		t.Fatalf("short GPU: %v", err)
	}
	// A share on two GPUs: the kubelet counts its units once; they come
	// from its GPUs, at most its units from each.
	two := unitsCand(10, 0, 1)
	ids, err = PreferUnits(two, append(rangeSlots(0, 95, 100), rangeSlots(1, 0, 100)...), nil, 10)
	if err != nil || len(ids) != 10 {
		t.Fatalf("two GPUs: %v %v", ids, err)
	}
	if err := TieUnits(two, ids); err != nil {
		t.Fatal(err)
	}
	bad := map[string][]string{
		"other GPU":      unitSlots(1, 0, 1, 2),
		"same twice":     {SlotID(uuid(0), 1), SlotID(uuid(0), 1)},
		"over its units": rangeSlots(0, 0, 26),
		"not ours":       {"nvidia0"},
	}
	for name, ids := range bad {
		if err := TieUnits(unitsCand(25, 0), ids); err == nil {
			t.Errorf("%s: tie accepted %v", name, ids)
		}
	}
}

// Shares summing to 100 units on one GPU always find their unit slots:
// the kubelet's units per GPU are the scheduler's books.
func TestUnitsNeverShort(t *testing.T) {
	free := rangeSlots(0, 0, api.DefaultUnitsPerGPU)
	for i, u := range []int64{25, 5, 20, 1, 49} {
		c := unitsCand(u, 0)
		c.Name = fmt.Sprint("p", i)
		ids, err := PreferUnits(c, free, nil, int(u))
		if err != nil {
			t.Fatalf("share %d of %d units: %v", i, u, err)
		}
		free = slices.DeleteFunc(free, func(id string) bool { return slices.Contains(ids, id) })
	}
	if len(free) != 0 {
		t.Fatalf("%d slots left", len(free))
	}
}
