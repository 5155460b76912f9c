package timeslice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
)

// shareWindow is the averaging window of AchievedShare.
const shareWindow = time.Second

type sample struct {
	at       time.Time
	achieved time.Duration
}

// publish refreshes status.json and the groups' read-back files until ctx ends.
func (s *Server) publish(ctx context.Context) {
	hist := map[string][]sample{}  // per gpu/group: samples over the last window
	written := map[string]string{} // read-back file -> content last written
	tk := time.NewTicker(s.cfg.StatusEvery)
	defer tk.Stop()
	for {
		s.retryLimits()
		st := s.status(hist)
		if err := writeJSON(nodestatus.Path(s.cfg.RunDir), st); err != nil {
			s.log.Error(err, "write status")
		}
		s.writeReadback(st, written)
		select {
		case <-ctx.Done():
			// Only its own: a daemon that stepped aside leaves the status of
			// the one serving the directory now.
			if cur, err := nodestatus.Read(s.cfg.RunDir); err == nil && cur.PID != os.Getpid() {
				return
			}
			if err := os.Remove(nodestatus.Path(s.cfg.RunDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.log.Error(err, "remove status")
			}
			return
		case <-tk.C:
		}
	}
}

func (s *Server) status(hist map[string][]sample) *nodestatus.Status {
	now := time.Now()
	st := &nodestatus.Status{Version: nodestatus.Version, Time: now, PID: os.Getpid(), Socket: s.cfg.Socket, Features: []string{nodestatus.FeatureGenerations},
		PeriodNs: int64(s.cfg.Policy.Period), Burst: s.cfg.Policy.Burst}
	var gpus []*gpuState
	st.Connections, gpus = s.connsAndGPUs()
	mem := map[string]map[string]groupstate.GPUMemory{} // group -> GPU -> slot
	for _, g := range gpus {
		st.GPUs = append(st.GPUs, s.gpuStatus(g, now, hist, mem))
	}
	slices.SortFunc(st.GPUs, func(a, b nodestatus.GPUStatus) int { return strings.Compare(a.UUID, b.UUID) })
	st.Memory = s.memoryStatus()
	return st
}

// connsAndGPUs returns the number of connections and the GPUs, under s.mu.
func (s *Server) connsAndGPUs() (int, []*gpuState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gpus := make([]*gpuState, 0, len(s.gpus))
	for _, g := range s.gpus {
		gpus = append(gpus, g)
	}
	return len(s.conns), gpus
}

// gpuStatus is one GPU's entry: each group's figures, its achieved share
// over the last window (hist, per gpu/group) and its memory (mem caches
// each group's memory by GPU for this round).
func (s *Server) gpuStatus(g *gpuState, now time.Time, hist map[string][]sample, mem map[string]map[string]groupstate.GPUMemory) nodestatus.GPUStatus {
	gs := nodestatus.GPUStatus{UUID: g.uuid.String()}
	snap := g.snapshot(now)
	var total time.Duration
	for _, t := range snap {
		total += t.Slice
	}
	for _, t := range snap {
		key := gs.UUID + "/" + t.Group
		h := window(hist[key], sample{now, t.Achieved}, now)
		hist[key] = h
		e := s.groupGPUStatus(t, total)
		if dt := now.Sub(h[0].at); dt > 0 {
			e.AchievedShare = float64(t.Achieved-h[0].achieved) / float64(dt)
		}
		if _, ok := mem[t.Group]; !ok {
			mem[t.Group] = s.memoryByGPU(t.Group)
		}
		m := mem[t.Group][strings.ToUpper(gs.UUID)]
		e.MemoryUsed, e.MemoryRefused = m.Used, m.Refused
		if t.Holding {
			gs.Holder = t.Group
		}
		gs.Groups = append(gs.Groups, e)
	}
	return gs
}

// window appends x to h and drops the samples older than shareWindow before
// now, keeping at least one (the oldest left is the window's start).
func window(h []sample, x sample, now time.Time) []sample {
	h = append(h, x)
	for len(h) > 1 && now.Sub(h[1].at) >= shareWindow {
		h = h[1:]
	}
	return h
}

// groupGPUStatus is a group's figures on one GPU, its expected share being
// its slice out of the GPU's total slices (capped at its ShareMax).
func (s *Server) groupGPUStatus(t groupStats, total time.Duration) nodestatus.GroupGPUStatus {
	e := nodestatus.GroupGPUStatus{Group: t.Group, Priority: t.Params.Priority.String(), SliceNs: int64(t.Slice),
		Share: t.Params.Share, AchievedNs: int64(t.Achieved), BankedNs: int64(t.Banked), DebtNs: int64(t.Debt),
		Members: t.Members, Waiting: t.Waiting, Holding: t.Holding, Grants: t.Grants, Renewals: t.Renewals,
		MemoryMax: s.settingsOf(t.Group).MemoryMax, Overruns: t.Overruns,
		OverrunP99Ns: int64(t.OverrunP99), OverrunMaxNs: int64(t.OverrunMax),
		GrantedNs: int64(t.Granted), Revokes: t.Revokes}
	if total > 0 {
		e.Expected = float64(t.Slice) / float64(total)
	}
	if m := t.Params.ShareMax; m > 0 {
		e.ShareMax, e.Expected = m, min(e.Expected, m)
	}
	return e
}

// memoryStatus is elastic memory's state, by GPU (sorted by UUID).
func (s *Server) memoryStatus() []nodestatus.MemoryGPUStatus {
	var out []nodestatus.MemoryGPUStatus
	for uuid, groups := range s.elasticStatus() {
		m := nodestatus.MemoryGPUStatus{UUID: uuid}
		for _, g := range groups {
			m.Groups = append(m.Groups, nodestatus.MemoryGroupStatus{Group: g.Name, Min: g.Min, Max: g.Max, Spill: g.Spill,
				Used: g.Used, Guaranteed: g.Guaranteed, Borrowed: g.Borrowed, Spilled: g.Spilled, Allowance: g.Min + g.Lent})
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b nodestatus.MemoryGPUStatus) int { return strings.Compare(a.UUID, b.UUID) })
	return out
}

// writeReadback refreshes gpu_time.achieved, burst.banked and memory.current
// of every group that has a directory.
func (s *Server) writeReadback(st *nodestatus.Status, written map[string]string) {
	achieved, banked := map[string]*strings.Builder{}, map[string]*strings.Builder{}
	for _, g := range st.GPUs {
		for _, e := range g.Groups {
			if achieved[e.Group] == nil {
				achieved[e.Group], banked[e.Group] = &strings.Builder{}, &strings.Builder{}
			}
			fmt.Fprintf(achieved[e.Group], "%s usec=%d share=%.2f%%\n", g.UUID, e.AchievedNs/1000, e.AchievedShare*100)
			fmt.Fprintf(banked[e.Group], "%s usec=%d\n", g.UUID, e.BankedNs/1000)
		}
	}
	names, err := s.tree.List()
	if err != nil {
		s.log.Error(err, "list groups")
		return
	}
	for key := range written { // forget removed groups (a new one of that name starts afresh)
		if g, _, _ := strings.Cut(key, "/"); !slices.Contains(names, g) {
			delete(written, key)
		}
	}
	elasticOf := map[string]*strings.Builder{}
	for _, g := range st.Memory {
		for _, e := range g.Groups {
			if elasticOf[e.Group] == nil {
				elasticOf[e.Group] = &strings.Builder{}
			}
			fmt.Fprintf(elasticOf[e.Group], "%s guaranteed=%d borrowed=%d spilled=%d allowance=%d\n", g.UUID,
				e.Guaranteed, e.Borrowed, e.Spilled, e.Allowance)
		}
	}
	for _, n := range names {
		mem, _ := s.memoryOf(n)
		files := map[string]string{"memory.current": fmt.Sprintf("%d\n", mem), "gpu_time.achieved": "", "burst.banked": "",
			"memory.elastic": ""}
		if b := elasticOf[n]; b != nil {
			files["memory.elastic"] = b.String()
		}
		if b := achieved[n]; b != nil {
			files["gpu_time.achieved"], files["burst.banked"] = b.String(), banked[n].String()
		}
		for f, v := range files {
			key := n + "/" + f
			if old, ok := written[key]; ok && old == v {
				continue
			}
			if err := s.tree.WriteFile(n, f, v); err != nil {
				if s.tree.Exists(n) {
					s.log.Error(err, "write read-back file", "group", n, "file", f)
				}
				continue
			}
			written[key] = v
		}
	}
}

// writeJSON replaces path atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".status-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", path, err), os.Remove(tmp.Name()))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return errors.Join(fmt.Errorf("write %s: %w", path, err), os.Remove(tmp.Name()))
	}
	return nil
}
