package groupstate

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestContextSeed(t *testing.T) {
	const mib300 = 300<<10 + 1
	for _, tc := range []struct {
		name     string
		prev     uint32
		measured []uint32
		want     uint32
	}{
		{"none", 0, nil, 0},
		{"unmeasured slots", 0, []uint32{0, 0}, 0},
		{"one group", 0, []uint32{mib300}, mib300},
		{"a lower figure lowers nothing", 0, []uint32{mib300, 2}, mib300},
		{"the largest", 0, []uint32{2, mib300, 200<<10 + 1}, mib300},
		{"at most the guess", 0, []uint32{mib300, ^uint32(0)}, SeedMaxKiB},
		{"the guess itself", 0, []uint32{SeedMaxKiB}, SeedMaxKiB},
		{"kept when its group is gone", mib300, nil, mib300},
		{"a prev past the guess is capped", ^uint32(0), nil, SeedMaxKiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ContextSeed(tc.prev, tc.measured); got != tc.want {
				t.Errorf("ContextSeed(%d, %v) = %d, want %d", tc.prev, tc.measured, got, tc.want)
			}
		})
	}
}

// SetContextSeed writes the header's seed (capped) and says whether it
// changed; ReadMemory returns each slot's measured context.
func TestSetContextSeed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := Create("/proc", path, "g"); err != nil {
		t.Fatal(err)
	}
	seed := func() uint32 {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return binary.LittleEndian.Uint32(b[OffSeed:])
	}
	for _, step := range []struct {
		set, want uint32
		changed   bool
	}{{300<<10 + 1, 300<<10 + 1, true}, {300<<10 + 1, 300<<10 + 1, false}, {^uint32(0), SeedMaxKiB, true}} {
		changed, err := SetContextSeed(path, step.set)
		if err != nil || changed != step.changed || seed() != step.want {
			t.Fatalf("SetContextSeed(%d): changed %v, %v; seed %d, want %d (changed %v)", step.set, changed, err,
				seed(), step.want, step.changed)
		}
	}
	if _, err := SetContextSeed(filepath.Join(dir, "missing"), 1); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	slot := make([]byte, GPUSize)
	binary.LittleEndian.PutUint32(slot, SlotReady)
	copy(slot[GPUOffUUID:], "GPU-0000")
	_, err = f.WriteAt(slot, int64(GPUsOffset))
	if err == nil {
		_, err = f.WriteAt(binary.LittleEndian.AppendUint32(nil, 300<<10+1), int64(OffContextKiB))
	}
	if err = errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	got, err := ReadMemory(path)
	if err != nil || len(got) != 1 || got[0].ContextKiB != 300<<10+1 {
		t.Fatalf("ReadMemory: %+v %v, want one slot with ContextKiB %d", got, err, 300<<10+1)
	}
}

// SetDeviceSeeds keeps one entry per kind of device (by memory size): a kind
// seen again takes the new figure, a new kind a free entry; seven kinds fill
// the six entries and the seventh is counted as not written; zeros are skipped.
func TestSetDeviceSeeds(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := Create("/proc", path, "g"); err != nil {
		t.Fatal(err)
	}
	h100, l4 := DeviceSeed{81559, 500<<10 + 1}, DeviceSeed{22491, 180<<10 + 1}
	for _, step := range []struct {
		set           []DeviceSeed
		changed, full int
		want          []DeviceSeed
	}{
		{[]DeviceSeed{h100}, 1, 0, []DeviceSeed{h100}},
		{[]DeviceSeed{h100, l4, {0, 5}, {5, 0}}, 1, 0, []DeviceSeed{h100, l4}},
		{[]DeviceSeed{{81559, 480<<10 + 1}}, 1, 0, []DeviceSeed{{81559, 480<<10 + 1}, l4}},
		{[]DeviceSeed{{1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}}, 4, 1,
			[]DeviceSeed{{81559, 480<<10 + 1}, l4, {1, 2}, {2, 2}, {3, 2}, {4, 2}}},
	} {
		changed, full, err := SetDeviceSeeds(path, step.set)
		got, rerr := ReadDeviceSeeds(path)
		if err != nil || rerr != nil || changed != step.changed || full != step.full || !slices.Equal(got, step.want) {
			t.Fatalf("SetDeviceSeeds(%v): changed %d full %d, %v; read %v, %v; want changed %d full %d, %v",
				step.set, changed, full, err, got, rerr, step.changed, step.full, step.want)
		}
	}
	if _, _, err := SetDeviceSeeds(filepath.Join(t.TempDir(), "none"), []DeviceSeed{h100}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

// SeedsHeld: each seed the daemon gave is in the header at its figure, or
// its kind has no entry and there is no free one either (not written).
func TestSeedsHeld(t *testing.T) {
	h100, l4 := DeviceSeed{81559, 500<<10 + 1}, DeviceSeed{22491, 180<<10 + 1}
	full := []DeviceSeed{h100, {1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}}
	for _, tc := range []struct {
		have, want []DeviceSeed
		held       bool
	}{
		{[]DeviceSeed{h100, l4}, []DeviceSeed{l4, h100}, true},
		{[]DeviceSeed{{81559, 1}, l4}, []DeviceSeed{h100, l4}, false},
		{[]DeviceSeed{l4}, []DeviceSeed{h100, l4}, false},
		{full, []DeviceSeed{h100, l4}, true},
		{nil, nil, true},
	} {
		if got := SeedsHeld(tc.have, tc.want); got != tc.held {
			t.Errorf("SeedsHeld(%v, %v) = %v, want %v", tc.have, tc.want, got, tc.held)
		}
	}
}
