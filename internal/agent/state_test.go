package agent

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/table"
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
	devs := []table.Device{{Index: 0, UUID: "a", Healthy: true}, {Index: 1, UUID: "b", Healthy: false}}
	health := func(g []deviceplugin.GPU) [2]bool { return [2]bool{g[0].Healthy, g[1].Healthy} }
	if got := health(advertised(gpus, api.NodeWorking, devs)); got != [2]bool{true, false} {
		t.Errorf("working, GPU b unhealthy: %v", got)
	}
	if got := health(advertised(gpus, api.NodeDraining, devs)); got != [2]bool{false, false} {
		t.Errorf("draining: %v", got)
	}
	if got := health(advertised(gpus, api.NodeNotReady, nil)); got != [2]bool{false, false} {
		t.Errorf("NVML failed: %v", got)
	}
	if !gpus[0].Healthy || !gpus[1].Healthy {
		t.Error("advertised changed its input")
	}
}
