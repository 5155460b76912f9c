package cli

import (
	"time"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/output"
)

// The documents `-o json|yaml` prints (apiVersion cli.gpuslice.io/v1,
// docs/cli.md). Durations are integer nanoseconds (…Ns), sizes integer bytes
// (…Bytes), shares fractions of 1.

// StatusDoc is `gpuslice status -o json|yaml` (kind Status).
type StatusDoc struct {
	output.TypeMeta `json:",inline"`
	Daemon          StatusDaemon `json:"daemon"`
	GPUs            []StatusGPU  `json:"gpus"`
}

// StatusDaemon is the time-slice daemon that wrote the status.
type StatusDaemon struct {
	PID         int       `json:"pid"`
	Socket      string    `json:"socket"`
	Time        time.Time `json:"time"`
	PeriodNs    int64     `json:"periodNs"`
	Burst       bool      `json:"burst"`
	Connections int       `json:"connections"`
}

// StatusGPU is one GPU: the groups sharing its time and its elastic memory.
type StatusGPU struct {
	UUID          string          `json:"uuid"`
	Holder        string          `json:"holder"` // the group holding the GPU now, "" for none
	Groups        []StatusGroup   `json:"groups"`
	ElasticMemory []ElasticMemory `json:"elasticMemory"`
}

// StatusGroup is one group on one GPU.
type StatusGroup struct {
	Name          string  `json:"name"`
	Priority      string  `json:"priority"`
	SliceNs       int64   `json:"sliceNs"`
	Share         float64 `json:"share"`              // configured share of the period; 0: none set
	ShareMax      float64 `json:"shareMax,omitempty"` // ceiling (share.max); absent: none
	ExpectedShare float64 `json:"expectedShare"`
	AchievedShare float64 `json:"achievedShare"` // over the last second
	GPUTimeNs     int64   `json:"gpuTimeNs"`
	GrantedNs     int64   `json:"grantedNs"`
	BankedNs      int64   `json:"bankedNs"`
	DebtNs        int64   `json:"debtNs"`
	Processes     int     `json:"processes"`
	Waiting       bool    `json:"waiting"`
	Holding       bool    `json:"holding"`
	Grants        uint64  `json:"grants"`
	Revokes       uint64  `json:"revokes"`
	Overruns      uint64  `json:"overruns"`
	OverrunP99Ns  int64   `json:"overrunP99Ns"`
	OverrunMaxNs  int64   `json:"overrunMaxNs"`
	MemoryMax     uint64  `json:"memoryMaxBytes"` // 0: no limit
	MemoryUsed    uint64  `json:"memoryUsedBytes"`
	MemoryRefused uint64  `json:"memoryRefused"` // allocations refused at the limit
}

// ElasticMemory is one group's elastic memory on one GPU.
type ElasticMemory struct {
	Group      string `json:"group"`
	Min        uint64 `json:"minBytes"`
	Max        uint64 `json:"maxBytes"`
	Spill      bool   `json:"spill"`
	Used       uint64 `json:"usedBytes"`
	Guaranteed uint64 `json:"guaranteedBytes"`
	Borrowed   uint64 `json:"borrowedBytes"`
	Spilled    uint64 `json:"spilledBytes"`
	Allowance  uint64 `json:"allowanceBytes"`
}

func statusDoc(st *nodestatus.Status) StatusDoc {
	doc := StatusDoc{TypeMeta: output.Meta("Status"), GPUs: []StatusGPU{}, Daemon: StatusDaemon{PID: st.PID, Socket: st.Socket,
		Time: st.Time, PeriodNs: st.PeriodNs, Burst: st.Burst, Connections: st.Connections}}
	index := map[string]int{}
	gpu := func(uuid string) *StatusGPU {
		i, ok := index[uuid]
		if !ok {
			i = len(doc.GPUs)
			index[uuid] = i
			doc.GPUs = append(doc.GPUs, StatusGPU{UUID: uuid, Groups: []StatusGroup{}, ElasticMemory: []ElasticMemory{}})
		}
		return &doc.GPUs[i]
	}
	for _, g := range st.GPUs {
		d := gpu(g.UUID)
		d.Holder = g.Holder
		for _, e := range g.Groups {
			d.Groups = append(d.Groups, StatusGroup{Name: e.Group, Priority: e.Priority, SliceNs: e.SliceNs, Share: e.Share, ShareMax: e.ShareMax,
				ExpectedShare: e.Expected, AchievedShare: e.AchievedShare, GPUTimeNs: e.AchievedNs, GrantedNs: e.GrantedNs,
				BankedNs: e.BankedNs, DebtNs: e.DebtNs, Processes: e.Members, Waiting: e.Waiting, Holding: e.Holding,
				Grants: e.Grants, Revokes: e.Revokes, Overruns: e.Overruns, OverrunP99Ns: e.OverrunP99Ns,
				OverrunMaxNs: e.OverrunMaxNs, MemoryMax: e.MemoryMax, MemoryUsed: e.MemoryUsed, MemoryRefused: e.MemoryRefused})
		}
	}
	for _, g := range st.Memory {
		d := gpu(g.UUID)
		for _, e := range g.Groups {
			d.ElasticMemory = append(d.ElasticMemory, ElasticMemory{Group: e.Group, Min: e.Min, Max: e.Max, Spill: e.Spill,
				Used: e.Used, Guaranteed: e.Guaranteed, Borrowed: e.Borrowed, Spilled: e.Spilled, Allowance: e.Allowance})
		}
	}
	return doc
}

// SMIDoc is `gpuslice smi -o json|yaml` (kind SMI): what NVML shows this process.
type SMIDoc struct {
	output.TypeMeta `json:",inline"`
	Driver          string   `json:"driver"`
	Simulated       bool     `json:"simulated"`
	GPUs            []SMIGPU `json:"gpus"`
}

// SMIGPU is one GPU as NVML shows it.
type SMIGPU struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid"`
	MemoryTotal       uint64 `json:"memoryTotalBytes"`
	MemoryUsed        uint64 `json:"memoryUsedBytes"`
	MemoryFree        uint64 `json:"memoryFreeBytes"`
	Utilization       uint32 `json:"utilizationPercent"`
	MemoryUtilization uint32 `json:"memoryUtilizationPercent"`
	// UtilizationNotSupported: NVML has no utilization for the GPU (a GPU
	// in MIG mode); the two percentages are 0 then.
	UtilizationNotSupported bool         `json:"utilizationNotSupported,omitempty"`
	Processes               []SMIProcess `json:"processes"`
}

// SMIProcess is one process with memory on a GPU (its PID as this process sees it).
type SMIProcess struct {
	PID    uint32 `json:"pid"`
	Memory uint64 `json:"memoryBytes"`
}

// GroupDoc is `gpuslice group get NAME -o json|yaml` (kind Group) and one
// item of GroupListDoc. Settings and Status hold the group's files as
// `group get` prints them: settings by name (memory.max, slice, ...), and the
// daemon's read-back files (memory.current, gpu_time.achieved, ...), which are
// absent until the daemon writes them.
type GroupDoc struct {
	output.TypeMeta `json:",inline"`
	Name            string            `json:"name"`
	Settings        map[string]string `json:"settings"`
	Status          map[string]string `json:"status"`
	// Error says why the group's settings could not be read (group ls only).
	Error string `json:"error,omitempty"`
}

// GroupListDoc is `gpuslice group ls -o json|yaml` (kind GroupList).
type GroupListDoc struct {
	output.TypeMeta `json:",inline"`
	Items           []GroupDoc `json:"items"`
}
