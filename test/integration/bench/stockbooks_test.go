package main

import (
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

func TestPlaceOnGPUs(t *testing.T) {
	gib := harness.GiB
	share := func(units, mem int64) api.ContainerRequest {
		return api.ContainerRequest{Name: "main", Count: 1, Units: units, MemoryBytes: mem * gib}
	}
	whole := api.ContainerRequest{Name: "main", Count: 1, Whole: true}
	// Two GPUs: GPU 0 held whole, GPU 1 with one 50-unit share of 8 GiB.
	held := func() []gpuRoom {
		return []gpuRoom{{units: 0, mem: 0, pods: 1, whole: true}, {units: 50, mem: 72 * gib, pods: 1}}
	}
	free := func(n int) []gpuRoom { return freeGPUs(n) }
	for _, tc := range []struct {
		name   string
		room   []gpuRoom
		reqs   []api.ContainerRequest
		misfit int
	}{
		{"share fits the shared GPU", held(), []api.ContainerRequest{share(50, 8)}, 0},
		{"80 units fit no GPU", held(), []api.ContainerRequest{share(80, 8)}, 1},
		{"whole needs an empty GPU", held(), []api.ContainerRequest{whole}, 1},
		{"memory counts", held(), []api.ContainerRequest{share(10, 73)}, 1},
		{"largest first: 80+20 and 50+50 on two GPUs", free(2), []api.ContainerRequest{share(50, 1), share(20, 1), share(50, 1), share(80, 1)}, 0},
		{"one GPU too few", free(2), []api.ContainerRequest{whole, share(10, 1), whole}, 1},
		{"two whole GPUs in one container", free(2), []api.ContainerRequest{{Name: "main", Count: 2, Whole: true}}, 0},
		{"nothing asked", held(), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]gpuRoom(nil), tc.room...)
			got := placeOnGPUs(tc.room, tc.reqs)
			if len(got) != tc.misfit {
				t.Fatalf("misfits %v, want %d", got, tc.misfit)
			}
			for i := range before {
				if before[i] != tc.room[i] {
					t.Fatalf("placeOnGPUs changed its input: %v -> %v", before, tc.room)
				}
			}
		})
	}
}
