package timeslice

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
)

// TestShmLayout checks the Go mirror of the group state file against a C
// build of libgpuslice/include/gpuslice/shm.h.
func TestShmLayout(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler: cannot check the layout against the C header")
	}
	src := `#include <stdio.h>
#include "gpuslice/shm.h"
int main(void) {
	printf("%zu %zu ", offsetof(struct gs_shm_header, limit), offsetof(struct gs_shm_header, limit_set));
	printf("%zu %zu %zu %zu %d %d ", offsetof(struct gs_shm_gpu, elastic), offsetof(struct gs_shm_gpu, min),
		offsetof(struct gs_shm_gpu, managed), offsetof(struct gs_shm_gpu, spilled), GS_ELASTIC_ON, GS_ELASTIC_SPILL);
	printf("%llu %u %zu %zu %d %d %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\n", (unsigned long long)GS_SHM_MAGIC,
		GS_SHM_VERSION, sizeof(struct gs_shm_header), sizeof(struct gs_shm_gpu), GS_SHM_MAX_GPUS, GS_SLOT_READY,
		offsetof(struct gs_shm_header, version), offsetof(struct gs_shm_header, header_size),
		offsetof(struct gs_shm_header, max_gpus), offsetof(struct gs_shm_header, gpu_size),
		offsetof(struct gs_shm_header, gpu_offset), offsetof(struct gs_shm_gpu, uuid),
		offsetof(struct gs_shm_gpu, limit), offsetof(struct gs_shm_gpu, used), offsetof(struct gs_shm_gpu, peak),
		offsetof(struct gs_shm_gpu, refused));
	return 0;
}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "l.c"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "l")
	inc := filepath.Join(repoRoot(), "libgpuslice", "include")
	if out, err := exec.Command(cc, "-std=c11", "-I", inc, "-o", bin, filepath.Join(dir, "l.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d %d ", shmOffLimit, shmOffLimitSet)
	want += fmt.Sprintf("%d %d %d %d %d %d ", shmGPUOffElastic, shmGPUOffMin, shmGPUOffManaged, shmGPUOffSpilled,
		shmElasticOn, shmElasticSpill)
	want += fmt.Sprintf("%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d", uint64(shmMagic), shmVersion, shmHeaderSize,
		shmGPUSize, shmMaxGPUs, shmSlotReady, shmOffVersion, shmOffHdrSize, shmOffMaxGPUs, shmOffGPUSize,
		shmOffGPUOff, shmGPUOffUUID, shmGPUOffLimit, shmGPUOffUsed, shmGPUOffPeak, shmGPUOffRefused)
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("shm.h layout\n got %s\nwant %s", got, want)
	}
}

// writeShm makes a state file with one ready GPU slot.
func writeShm(t *testing.T, path string, used uint64) {
	t.Helper()
	le := binary.LittleEndian
	b := make([]byte, shmHeaderSize+shmMaxGPUs*shmGPUSize+4096)
	le.PutUint64(b, shmMagic)
	le.PutUint32(b[shmOffVersion:], shmVersion)
	le.PutUint32(b[shmOffHdrSize:], shmHeaderSize)
	le.PutUint32(b[shmOffMaxGPUs:], shmMaxGPUs)
	le.PutUint32(b[shmOffGPUSize:], shmGPUSize)
	le.PutUint64(b[shmOffGPUOff:], shmHeaderSize)
	slot := b[shmHeaderSize:]
	le.PutUint32(slot, shmSlotReady)
	copy(slot[shmGPUOffUUID:], "GPU-0000")
	le.PutUint64(slot[shmGPUOffLimit:], 1<<30)
	le.PutUint64(slot[shmGPUOffUsed:], used)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMemoryState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.state")
	writeShm(t, path, 123)
	if n, err := setMemoryLimit(path, 2<<30); err != nil || n != 1 {
		t.Fatalf("set limit: %d %v", n, err)
	}
	got, err := readMemory(path)
	if err != nil || len(got) != 1 || got[0] != (gpuMemory{UUID: "GPU-0000", Limit: 2 << 30, Used: 123}) {
		t.Fatalf("read %+v %v", got, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.state")
	if err := os.WriteFile(bad, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(bad)
	if _, err := setMemoryLimit(bad, 1); err == nil {
		t.Fatal("limit written into a file without the magic")
	}
	if after, _ := os.ReadFile(bad); string(after) != string(before) {
		t.Fatal("a bad file was changed")
	}
	if _, err := readMemory(bad); err == nil {
		t.Fatal("bad file read")
	}
}

// TestReliabilityLimitRestored: a member that writes a larger limit into its
// group's state file (mapped writable: the counts live there) has the group's
// memory.max put back at the next status refresh.
func TestReliabilityLimitRestored(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "mem", group.Change{File: "memory.max", Value: "3GiB"})
	state := filepath.Join(cfg.RunDir, "groups", "mem", "gpu.state")
	writeShm(t, state, 4096)
	startDaemon(t, cfg)
	limit := func() uint64 {
		got, err := readMemory(state)
		if err != nil || len(got) != 1 {
			t.Fatalf("read %s: %+v %v", state, got, err)
		}
		return got[0].Limit
	}
	waitLimit := func(want uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); limit() != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("limit %d, want %d", limit(), want)
			}
		}
	}
	waitLimit(3 << 30)
	if _, err := setMemoryLimit(state, 0); err != nil { // what a member could write: no limit
		t.Fatal(err)
	}
	waitLimit(3 << 30)
	// The header's limit (what a slot claimed later takes), written by
	// anything but the daemon (a member, an old CLI or agent): put back too.
	if err := setHeaderLimit(state, 8<<30, stateLockWait); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if lim, set, err := headerLimit(state); err == nil && set && lim == 3<<30 {
			break
		}
		if time.Now().After(deadline) {
			lim, set, err := headerLimit(state)
			t.Fatalf("header limit %d (set %v, %v), want 3 GiB put back", lim, set, err)
		}
	}
}

// A new memory.max reaches the running processes' group state file, and the
// group's use shows in memory.current.
func TestMemoryLimitAppliesLive(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "mem")
	state := filepath.Join(cfg.RunDir, "groups", "mem", "gpu.state")
	writeShm(t, state, 4096)
	startDaemon(t, cfg)
	setGroup(t, cfg, "mem", group.Change{File: "memory.max", Value: "3GiB"})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := readMemory(state)
		cur, _ := group.NewTree(cfg.RunDir).ReadFile("mem", group.FileMemoryCurrent)
		if err == nil && len(got) == 1 && got[0].Limit == 3<<30 && cur == "4096" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit not applied: %+v %v, memory.current %q", got, err, cur)
		}
	}
}
