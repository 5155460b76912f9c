package groupstate

import (
	"path/filepath"
	"sync/atomic"
	"testing"
)

// entry is a process entry as a test writes it: index, state, pid, bytes on GPU slot 0.
type entry struct {
	i     int
	state uint32
	pid   int32
	used  uint64
}

func procOff(i int) int { return HeaderSize + MaxGPUs*GPUSize + i*ProcSize }

// put writes e into the mapping as a member would (state last).
func put(s *State, e entry) {
	off := procOff(e.i)
	atomic.StoreUint32(s.U32(off+ProcOffPID), uint32(e.pid))
	atomic.StoreUint64(s.U64(off+ProcOffStart), 7)
	atomic.StoreUint64(s.U64(off+ProcOffPIDNS), 9)
	old := atomic.SwapUint64(s.U64(off+ProcOffUsed), e.used)
	atomic.AddUint64(s.U64(GPUsOffset+GPUOffUsed), e.used-old)
	atomic.StoreUint32(s.U32(off), e.state)
}

// Reap judges only the entries its first pass saw, each only while it is
// the same process at the same place: an entry claimed between the passes
// (into a free entry, or into one freed and taken again by another process)
// is not judged, whatever judge would say of it; a seen entry freed in
// between is not released twice; an entry left claiming is freed.
func TestReapJudgesOnlyWhatItSaw(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   []entry // in the file when Reap starts
		between  []entry // written after the first pass, before the judgement
		reaped   int
		live     []int32 // pids of live entries after
		slotUsed uint64  // GPU slot 0's used after
	}{
		{name: "dead seen entry freed", before: []entry{{0, ProcLive, 100, 10}, {1, ProcLive, 101, 20}},
			reaped: 2, slotUsed: 0},
		{name: "claimed into a free entry between the passes",
			before: []entry{{0, ProcLive, 100, 10}}, between: []entry{{5, ProcLive, 200, 40}},
			reaped: 1, live: []int32{200}, slotUsed: 40},
		{name: "freed and taken by another process between the passes",
			before: []entry{{0, ProcLive, 100, 10}}, between: []entry{{0, ProcFree, 100, 0}, {0, ProcLive, 300, 50}},
			reaped: 0, live: []int32{300}, slotUsed: 50},
		{name: "freed between the passes", before: []entry{{0, ProcLive, 100, 10}, {1, ProcLive, 101, 20}},
			between: []entry{{0, ProcFree, 100, 0}}, reaped: 1, slotUsed: 0},
		{name: "left claiming by a dead claimer", before: []entry{{2, ProcClaiming, 0, 0}, {4, ProcLive, 400, 5}},
			reaped: 2, slotUsed: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := Create("/proc", path, "g"); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path, false, LockWait)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			for _, e := range tc.before {
				put(s, e)
			}
			judged := map[int32]bool{}
			n := s.reap(func(ps []Process) Judge {
				for _, e := range tc.between {
					put(s, e)
				}
				return func(p Process) (bool, int32) { judged[p.PID] = true; return true, 0 }
			})
			if n != tc.reaped {
				t.Errorf("reaped %d, want %d", n, tc.reaped)
			}
			var live []int32
			s.Procs(func(_ int, p Process) bool { live = append(live, p.PID); return true })
			if len(live) != len(tc.live) || (len(live) > 0 && live[0] != tc.live[0]) {
				t.Errorf("live after: %v, want %v", live, tc.live)
			}
			for _, pid := range tc.live {
				if judged[pid] {
					t.Errorf("pid %d judged: the first pass never saw it", pid)
				}
			}
			if got := atomic.LoadUint64(s.U64(GPUsOffset + GPUOffUsed)); got != tc.slotUsed {
				t.Errorf("slot used %d, want %d", got, tc.slotUsed)
			}
			for i := range MaxProcs {
				if st := atomic.LoadUint32(s.U32(procOff(i))); st == ProcClaiming {
					t.Errorf("entry %d still claiming", i)
				}
			}
		})
	}
}
