package gpunoderow

import (
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// An mps GPU publishes its mode, live clients and units free bounded by the
// client slots left; a GPU naming no mode is published as timeslice.
func TestStatusSharing(t *testing.T) {
	devs := []Device{
		{Index: 0, UUID: "GPU-a", MemoryBytes: 1 << 30, Healthy: true},
		{Index: 1, UUID: "GPU-b", MemoryBytes: 1 << 30, Healthy: true, UnitsTotal: 96, SharingMode: api.SharingMPS,
			MPSClients: 40, MPSClientSlots: 48, MPSUnitsPerClient: 2},
		{Index: 2, UUID: "GPU-c", MemoryBytes: 1 << 30, Healthy: true, UnitsTotal: 96, SharingMode: api.SharingMPS,
			MPSClients: 1, MPSClientSlots: 48, MPSUnitsPerClient: 2},
	}
	st, err := Status(devs, map[int32]Held{1: {Units: 10}, 2: {Units: 25}}, v1alpha2.NodeWorking, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		mode    api.SharingMode
		free    int64
		clients int32
	}{{api.SharingTimeslice, 100, 0}, {api.SharingMPS, 16, 40}, {api.SharingMPS, 71, 1}}
	for i, w := range want {
		g := st.GPUs[i]
		if g.SharingMode != w.mode || g.UnitsFree != w.free || g.MPSClients != w.clients {
			t.Errorf("GPU %d: mode %q, free %d, clients %d; want %q, %d, %d", i, g.SharingMode, g.UnitsFree, g.MPSClients, w.mode, w.free, w.clients)
		}
	}
}
