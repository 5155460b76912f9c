package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// lostNVML answers for GPUs 0..count-1 but fails to describe those in lost,
// as NVML does for a GPU that fell off the bus.
type lostNVML struct {
	gpu.NVML
	count int
	lost  map[int]bool
}

func (n lostNVML) Count() (int, error) { return n.count, nil }

func (n lostNVML) Device(i int) (gpu.Device, error) {
	if n.lost[i] {
		return gpu.Device{}, errors.New("nvml: GPU is lost")
	}
	return gpu.Device{Index: i, UUID: "GPU-" + string(rune('a'+i)), Minor: i, MemoryTotal: 1 << 34}, nil
}

// TestDiscoverLostGPU: a GPU NVML cannot describe is withheld and the others
// are served (an agent restarted after XID 79 must come up); none at all is
// an error.
func TestDiscoverLostGPU(t *testing.T) {
	gpus, found, err := discover(context.Background(), lostNVML{count: 4, lost: map[int]bool{1: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 3 || len(found) != 3 || gpus[1].Index != 2 || found[1].Index != 2 || gpus[2].UUID != "GPU-d" {
		t.Fatalf("GPUs %+v, found %+v: want 0, 2 and 3", gpus, found)
	}
	if _, _, err := discover(context.Background(), lostNVML{count: 2, lost: map[int]bool{0: true, 1: true}}); err == nil {
		t.Fatal("every GPU lost: no error")
	}
}
