//go:build timeslicee2e

package timeslicee2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/proto"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/groupstate/groupstatetest"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

const gib = uint64(1) << 30

// elasticShm makes a group's state file with one slot on testGPU.
func elasticShm(t *testing.T, cfg timeslice.Config, name string, used uint64) string {
	t.Helper()
	path := groupstate.Path(cfg.RunDir, name)
	groupstatetest.WriteSlot(t, path, "GPU-0000", used)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	slot := b[groupstate.HeaderSize:]
	clear(slot[groupstate.GPUOffUUID : groupstate.GPUOffUUID+groupstate.UUIDLen])
	copy(slot[groupstate.GPUOffUUID:], testGPU.String())
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func slotLimit(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[groupstate.HeaderSize+groupstate.GPUOffLimit:])
}

// TestElasticBorrow: three groups with 6 GiB guarantees and 20 GiB ceilings
// on a 24 GiB GPU (device readings from the groups' files): a borrow is
// granted while memory is free and written into the caller's state file;
// refused once the others' guarantees need the rest; refused past the ceiling.
func TestElasticBorrow(t *testing.T) {
	cfg := testCfg(t)
	cfg.Elastic.Reserve = 0
	me := fmt.Sprintf("pid-%d", os.Getpid())
	// The groups' state files, read by the daemon's goroutines (DeviceMemory)
	// while the test rewrites them.
	var mu sync.Mutex
	files := map[string]string{}
	setUsed := func(name string, used uint64) {
		path := elasticShm(t, cfg, name, used)
		mu.Lock()
		defer mu.Unlock()
		files[name] = path
	}
	cfg.DeviceMemory = func(uuid string) (uint64, uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		var used uint64
		for _, p := range files {
			if m, err := groupstate.ReadMemory(p); err == nil && len(m) == 1 {
				used += m[0].Used
			}
		}
		return 24 * gib, used, nil
	}
	for _, n := range []string{me, "b", "c"} {
		setGroup(t, cfg, n, group.Change{File: "memory.max", Value: "20GiB"}, group.Change{File: "memory.min", Value: "6GiB"})
		setUsed(n, 0)
	}
	setUsed(me, 6*gib)
	startDaemon(t, cfg)
	c, err := client.Dial(context.Background(), cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := c.Borrow(testGPU, 6*gib, 0, nil)
	if err != nil || l.Status != proto.LendGranted || l.Allowance != 12*gib {
		t.Fatalf("borrow of 6 GiB: %+v %v", l, err)
	}
	if got := slotLimit(t, groupstate.Path(cfg.RunDir, me)); got != 12*gib {
		t.Fatalf("state file allowance %d, want 12 GiB", got)
	}
	setUsed(me, 12*gib)
	l, err = c.Borrow(testGPU, 1*gib, 0, nil)
	if err != nil || l.Status != proto.LendRefused || !strings.Contains(proto.String(l.Message[:]), "guarantees") {
		t.Fatalf("borrow into the others' guarantees: %+v %v", l, err)
	}
	if l.Available != 12*gib {
		t.Fatalf("available %d, want 12 GiB", l.Available)
	}
	setUsed("b", 6*gib)
	setUsed("c", 6*gib)
	l, err = c.Borrow(testGPU, 9*gib, 0, nil)
	if err != nil || l.Status != proto.LendRefused || !strings.Contains(proto.String(l.Message[:]), "ceiling") {
		t.Fatalf("borrow past the ceiling: %+v %v", l, err)
	}
	// status.json and memory.elastic show the books.
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(cfg.RunDir, "groups", me, group.FileMemoryElastic))
		if err == nil && strings.Contains(string(b), fmt.Sprintf("guaranteed=%d borrowed=%d spilled=0", 6*gib, 6*gib)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("memory.elastic: %q %v", b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestElasticNotConfigured: a group without memory.min is told so; a
// daemon without a driver says why.
func TestElasticNotConfigured(t *testing.T) {
	cfg := testCfg(t)
	startDaemon(t, cfg)
	c, err := client.Dial(context.Background(), cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	l, err := c.Borrow(testGPU, gib, 0, nil)
	if err != nil || l.Status != proto.LendUnknown {
		t.Fatalf("borrow without memory.min: %+v %v", l, err)
	}
}
