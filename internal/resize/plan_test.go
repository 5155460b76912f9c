package resize

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func node(n int, unhealthy ...int32) *v1alpha2.GPUNode {
	g := &v1alpha2.GPUNode{Status: v1alpha2.GPUNodeStatus{State: v1alpha2.NodeWorking}}
	g.Name = "n1"
	for i := range int32(n) {
		h := v1alpha2.GPUHealthy
		if slices.Contains(unhealthy, i) {
			h = v1alpha2.GPUUnhealthy
		}
		g.Status.GPUs = append(g.Status.GPUs, v1alpha2.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Memory: v1alpha2.Bytes(1 << 34), UnitsTotal: 100, Health: h})
	}
	return g
}

func whole(container string, idx ...int32) *api.Assignment {
	a := &api.Assignment{Version: api.AssignmentVersion, Node: "n1"}
	c := api.ContainerAssignment{Name: container}
	for _, i := range idx {
		c.GPUs = append(c.GPUs, api.GPUAssignment{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Units: 100, MemoryBytes: 1 << 34, Exclusive: true})
	}
	a.Containers = append(a.Containers, c)
	return a
}

func indices(a *api.Assignment, container string) []int32 {
	for _, c := range a.Containers {
		if c.Name == container {
			var out []int32
			for _, g := range c.GPUs {
				out = append(out, g.Index)
			}
			return out
		}
	}
	return nil
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name    string
		cur     []int32
		others  [][]int32
		gpus    int
		bad     []int32
		want    int
		got     []int32
		changed bool
		missing int
	}{
		{"1 to 3", []int32{0}, nil, 4, nil, 3, []int32{0, 1, 2}, true, 0},
		{"3 to 2 releases highest", []int32{0, 1, 2}, nil, 4, nil, 2, []int32{0, 1}, true, 0},
		{"2 to 4 with 1 free", []int32{0, 1}, [][]int32{{2}}, 4, nil, 4, []int32{0, 1, 3}, true, 1},
		{"short, nothing free", []int32{0, 1}, [][]int32{{2, 3}}, 4, nil, 4, []int32{0, 1}, false, 2},
		{"same count", []int32{1, 3}, nil, 4, nil, 2, []int32{1, 3}, false, 0},
		{"skips unhealthy and held", []int32{0}, [][]int32{{1}}, 4, []int32{2}, 2, []int32{0, 3}, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var others []*api.Assignment
			for i, o := range tc.others {
				others = append(others, whole(fmt.Sprint("o", i), o...))
			}
			a := whole("main", tc.cur...)
			out, short, changed := Plan(a, map[string]int{"main": tc.want}, freeGPUs(node(tc.gpus, tc.bad...), others))
			if got := indices(out, "main"); !slices.Equal(got, tc.got) || changed != tc.changed {
				t.Fatalf("got %v changed=%v, want %v changed=%v", got, changed, tc.got, tc.changed)
			}
			missing := 0
			for _, s := range short {
				missing += s.Want - s.Got
			}
			if missing != tc.missing {
				t.Fatalf("missing %d (%v), want %d", missing, short, tc.missing)
			}
			if err := out.Validate(); err != nil {
				t.Fatalf("planned assignment invalid: %v", err)
			}
			if got := indices(a, "main"); !slices.Equal(got, tc.cur) {
				t.Fatalf("input assignment modified: %v", got)
			}
		})
	}
}

func TestParseWant(t *testing.T) {
	two := whole("main", 0)
	two.Containers = append(two.Containers, api.ContainerAssignment{Name: "side", GPUs: []api.GPUAssignment{{Index: 1, UUID: "GPU-1", Units: 10}}})
	cases := []struct {
		s    string
		a    *api.Assignment
		want map[string]int
		err  bool
	}{
		{"3", whole("main", 0), map[string]int{"main": 3}, false},
		{" 2 ", whole("main", 0), map[string]int{"main": 2}, false}, // JSON allows whitespace
		{`{"main":4}`, two, map[string]int{"main": 4}, false},
		{"2", two, map[string]int{"main": 2}, false},
		{`{"side":2}`, two, nil, true},
		{"0", whole("main", 0), nil, true},
		{"65", whole("main", 0), nil, true},
		{"x", whole("main", 0), nil, true},
		{`{"main":1,"main":2}`, two, nil, true},
		{"", whole("main", 0), nil, true},
	}
	for _, tc := range cases {
		got, err := ParseWant(tc.s, tc.a)
		if tc.err {
			if !errors.Is(err, ErrInvalidWant) || (tc.a == two && tc.s == `{"side":2}`) == errors.Is(err, api.ErrInvalidGPUs) {
				t.Errorf("ParseWant(%q) err = %v, want ErrInvalidWant", tc.s, err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseWant(%q) = %v, %v; want %v", tc.s, got, err, tc.want)
		}
	}
}

// FuzzParseWant: never panics; accepted counts are in range and name whole containers.
func FuzzParseWant(f *testing.F) {
	for _, s := range []string{"3", `{"main":2}`, `{"main":1,"side":2}`, "{", ",", `{"main":-1}`} {
		f.Add(s)
	}
	a := whole("main", 0)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseWant(s, a)
		if err != nil {
			if !errors.Is(err, ErrInvalidWant) {
				t.Fatal(err)
			}
			return
		}
		for name, n := range got {
			if name != "main" || n < 1 || n > api.MaxGPUsPerContainer {
				t.Fatalf("accepted %q -> %v", s, got)
			}
		}
	})
}

// freeGPUs is the node's healthy GPUs that no assignment in others holds.
func freeGPUs(node *v1alpha2.GPUNode, others []*api.Assignment) []v1alpha2.GPU {
	used := map[int32]bool{}
	for _, a := range others {
		if a.Node != node.Name {
			continue
		}
		for idx := range a.Totals() {
			used[idx] = true
		}
	}
	var out []v1alpha2.GPU
	for _, g := range node.Status.GPUs {
		if g.Health == v1alpha2.GPUHealthy && !used[g.Index] {
			out = append(out, g)
		}
	}
	return out
}
