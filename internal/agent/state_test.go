package agent

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func TestDrainState(t *testing.T) {
	cases := []struct {
		cordoned bool
		ann      map[string]string
		want     v1alpha2.NodeState
	}{
		{false, nil, v1alpha2.NodeWorking},
		{true, nil, v1alpha2.NodeDraining},
		{false, map[string]string{api.AnnotationDrain: "true"}, v1alpha2.NodeDraining},
		{false, map[string]string{api.AnnotationDrain: "false"}, v1alpha2.NodeWorking},
		{false, map[string]string{api.AnnotationDrain: "yes"}, v1alpha2.NodeWorking},
	}
	for _, tc := range cases {
		if got, msg := drainState(tc.cordoned, tc.ann); got != tc.want || (got == v1alpha2.NodeDraining) != (msg != "") {
			t.Errorf("cordoned %v annotations %v: %s %q, want %s", tc.cordoned, tc.ann, got, msg, tc.want)
		}
	}
}

func TestAdvertisedHealth(t *testing.T) {
	gpus := []gpuset.GPU{{Index: 0, UUID: "a", Healthy: true}, {Index: 1, UUID: "b", Healthy: true}}
	devs := []gpunoderow.Device{{Index: 0, UUID: "a", Healthy: true}, {Index: 1, UUID: "b", Healthy: false}}
	notA := func(u string) bool { return u != "a" }
	for _, tc := range []struct {
		name    string
		state   v1alpha2.NodeState
		devs    []gpunoderow.Device
		healthy func(string) bool
		want    [2]bool
	}{
		{"working, GPU b measured unhealthy", v1alpha2.NodeWorking, devs, nil, [2]bool{true, false}},
		{"draining", v1alpha2.NodeDraining, devs, nil, [2]bool{false, false}},
		{"NVML failed", v1alpha2.NodeNotReady, nil, nil, [2]bool{false, false}},
		{"not published yet", "", nil, nil, [2]bool{true, true}},
		{"not published yet, XID on a", "", nil, notA, [2]bool{false, true}},
		{"working, XID on a", v1alpha2.NodeWorking, devs, notA, [2]bool{false, false}},
	} {
		g := advertised(gpus, tc.state, tc.devs, tc.healthy)
		if got := [2]bool{g[0].Healthy, g[1].Healthy}; got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !gpus[0].Healthy || !gpus[1].Healthy {
		t.Error("advertised changed its input")
	}
}
