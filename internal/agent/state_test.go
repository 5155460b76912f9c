package agent

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestDrainState(t *testing.T) {
	cases := []struct {
		cordoned bool
		ann      map[string]string
		want     api.NodeState
	}{
		{false, nil, api.NodeWorking},
		{true, nil, api.NodeDraining},
		{false, map[string]string{api.AnnotationDrain: "true"}, api.NodeDraining},
		{false, map[string]string{api.AnnotationDrain: "false"}, api.NodeWorking},
		{false, map[string]string{api.AnnotationDrain: "yes"}, api.NodeWorking},
	}
	for _, tc := range cases {
		if got, msg := drainState(tc.cordoned, tc.ann); got != tc.want || (got == api.NodeDraining) != (msg != "") {
			t.Errorf("cordoned %v annotations %v: %s %q, want %s", tc.cordoned, tc.ann, got, msg, tc.want)
		}
	}
}

func TestAdvertisedHealth(t *testing.T) {
	gpus := []deviceplugin.GPU{{Index: 0, UUID: "a", Healthy: true}, {Index: 1, UUID: "b", Healthy: true}}
	devs := []gpunoderow.Device{{Index: 0, UUID: "a", Healthy: true}, {Index: 1, UUID: "b", Healthy: false}}
	notA := func(u string) bool { return u != "a" }
	for _, tc := range []struct {
		name    string
		state   api.NodeState
		devs    []gpunoderow.Device
		healthy func(string) bool
		want    [2]bool
	}{
		{"working, GPU b measured unhealthy", api.NodeWorking, devs, nil, [2]bool{true, false}},
		{"draining", api.NodeDraining, devs, nil, [2]bool{false, false}},
		{"NVML failed", api.NodeNotReady, nil, nil, [2]bool{false, false}},
		{"not published yet", "", nil, nil, [2]bool{true, true}},
		{"not published yet, XID on a", "", nil, notA, [2]bool{false, true}},
		{"working, XID on a", api.NodeWorking, devs, notA, [2]bool{false, false}},
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
