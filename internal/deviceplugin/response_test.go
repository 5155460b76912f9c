package deviceplugin

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestNodeGPUs: a container's assigned GPUs are looked up on the node and
// come back as sorted minors and UUIDs; one not on the node, or unhealthy,
// is an error naming it.
func TestNodeGPUs(t *testing.T) {
	node := map[string]gpuset.GPU{
		"GPU-a": {UUID: "GPU-a", Minor: 3, Healthy: true},
		"GPU-b": {UUID: "GPU-b", Minor: 1, Healthy: true},
		"GPU-c": {UUID: "GPU-c", Minor: 0},
	}
	for _, tc := range []struct {
		name       string
		assigned   []string
		wantMinors []uint32
		wantUUIDs  []string
		wantErr    string
	}{
		{name: "none", wantMinors: []uint32{}, wantUUIDs: []string{}},
		{name: "sorted", assigned: []string{"GPU-a", "GPU-b"}, wantMinors: []uint32{1, 3}, wantUUIDs: []string{"GPU-a", "GPU-b"}},
		{name: "missing", assigned: []string{"GPU-a", "GPU-x"}, wantErr: "GPU-x is not on this node"},
		{name: "unhealthy", assigned: []string{"GPU-c"}, wantErr: "GPU-c is unhealthy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Candidate{Namespace: "ns", Name: "p", Container: "c"}
			for _, u := range tc.assigned {
				c.GPUs = append(c.GPUs, api.GPUAssignment{UUID: u})
			}
			minors, uuids, err := nodeGPUs(c, node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(minors, tc.wantMinors) || !slices.Equal(uuids, tc.wantUUIDs) {
				t.Errorf("got %v %v, want %v %v", minors, uuids, tc.wantMinors, tc.wantUUIDs)
			}
		})
	}
}

// TestContainerGroupFileMatchesLibrary: the device plugin mounts the group
// file where the library looks for it (GS_CONTAINER_GROUP_FILE in shm.h).
func TestContainerGroupFileMatchesLibrary(t *testing.T) {
	b, err := os.ReadFile("../../libgpuslice/include/gpuslice/shm.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#define GS_CONTAINER_GROUP_FILE \"" + ContainerGroupFile + "\"",
		"#define GS_CONTAINER_GATE_OFF \"" + ContainerGroupDir + "/" + GateOffFile + "\"",
	} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("shm.h does not say %s", want)
		}
	}
}
