// Package groupstatetest writes group state file entries as the library does,
// for tests of what reads them (the daemon's sweep, process identity).
package groupstatetest

import (
	"encoding/binary"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// AddMember writes a live process entry i holding used bytes on GPU slot 0 (as
// the library does) into a state file made by groupstate.Create.
func AddMember(t testing.TB, path string, i int, pid int32, start, pidns, used uint64) {
	t.Helper()
	s, err := groupstate.Open(path, false, groupstate.LockWait)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	off := groupstate.HeaderSize + groupstate.MaxGPUs*groupstate.GPUSize + i*groupstate.ProcSize
	atomic.StoreUint32(s.U32(off+groupstate.ProcOffPID), uint32(pid))
	atomic.StoreUint64(s.U64(off+groupstate.ProcOffStart), start)
	atomic.StoreUint64(s.U64(off+groupstate.ProcOffPIDNS), pidns)
	atomic.StoreUint64(s.U64(off+groupstate.ProcOffUsed), used)
	atomic.StoreUint32(s.U32(off), groupstate.ProcLive)
	atomic.StoreUint32(s.U32(groupstate.HeaderSize), groupstate.SlotReady)
	atomic.AddUint64(s.U64(groupstate.HeaderSize+groupstate.GPUOffUsed), used)
}

// DeadPID is the pid of a process that has exited and been waited for.
func DeadPID(t testing.TB) int32 {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return int32(c.Process.Pid)
}

// WriteSlot writes a state file of the current layout with one ready GPU slot
// (uuid, a 1 GiB limit, used bytes), as a library member leaves it.
func WriteSlot(t testing.TB, path, uuid string, used uint64) {
	t.Helper()
	le := binary.LittleEndian
	b := make([]byte, groupstate.HeaderSize+groupstate.MaxGPUs*groupstate.GPUSize+4096)
	le.PutUint64(b, groupstate.Magic)
	le.PutUint32(b[groupstate.OffVersion:], groupstate.Version)
	le.PutUint32(b[groupstate.OffHeaderSize:], uint32(groupstate.HeaderSize))
	le.PutUint32(b[groupstate.OffMaxGPUs:], groupstate.MaxGPUs)
	le.PutUint32(b[groupstate.OffGPUSize:], uint32(groupstate.GPUSize))
	le.PutUint64(b[groupstate.OffGPUOffset:], uint64(groupstate.GPUsOffset))
	slot := b[groupstate.HeaderSize:]
	le.PutUint32(slot, groupstate.SlotReady)
	copy(slot[groupstate.GPUOffUUID:], uuid)
	le.PutUint64(slot[groupstate.GPUOffLimit:], 1<<30)
	le.PutUint64(slot[groupstate.GPUOffUsed:], used)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
