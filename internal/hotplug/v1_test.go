package hotplug

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/devices"
)

func randomDenyAll(t *testing.T, rng *rand.Rand) *devices.Emulator {
	t.Helper()
	num := func() int64 {
		if rng.IntN(4) == 0 {
			return devices.Wildcard
		}
		return int64(rng.IntN(3))
	}
	e := devices.NewEmulator(false)
	for range rng.IntN(8) {
		ty := []devices.Type{devices.TypeChar, devices.TypeChar, devices.TypeBlock}[rng.IntN(3)]
		r := devices.Rule{Type: ty, Major: num(), Minor: num(), Perms: devices.Perms(1 + rng.IntN(7)), Allow: rng.IntN(3) != 0}
		if err := e.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// The library's v1 setter, on the kernel's devices controller, reaches every
// target from every state (SetV1 reads devices.list back and compares).
func TestSetV1ReachesTarget(t *testing.T) {
	needRoot(t)
	m := v1Mounts(t)
	// An empty cgroup: no process of ours is ever denied a device.
	dir := filepath.Join(m.V1Devices, fmt.Sprintf("gpuslice-setv1-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		target := randomDenyAll(t, rng)
		if err := SetV1(dir, target); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
	}
}
