// Package nodestatus is what a client needs of the time-slice daemon
// (`gpuslice node`, internal/timeslice) without importing it: where its
// socket is (SocketPath, EnvSocket) and the status it publishes in
// <run dir>/status.json (Status, versioned; Read). The daemon writes the
// status; the CLI, the node agent, the metrics collector and tests read it.
package nodestatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/paths"
)

// EnvSocket overrides the socket path.
const EnvSocket = "GPUSLICE_NODE_SOCKET"

// SocketPath is the socket clients connect to: $GPUSLICE_NODE_SOCKET, else
// <run dir>/node.sock (/run/gpuslice/node.sock for root).
func SocketPath(getenv func(string) string) string {
	if s := getenv(EnvSocket); s != "" {
		return s
	}
	return filepath.Join(paths.RunDir(getenv), "node.sock")
}

// Path is where the daemon publishes its status (status.json).
func Path(runDir string) string { return filepath.Join(runDir, "status.json") }

// Version is the version of status.json's schema.
const Version = 1

// Status is what the daemon publishes in <run dir>/status.json.
type Status struct {
	Version  int       `json:"version"`
	Time     time.Time `json:"time"`
	PID      int       `json:"pid"`
	Socket   string    `json:"socket"`
	PeriodNs int64     `json:"periodNs"`
	Burst    bool      `json:"burst"`
	// Connections is the number of open client connections.
	Connections int `json:"connections"`
	// Features are what this daemon does that older ones did not
	// (FeatureGenerations); absent from an older daemon's status.
	Features []string    `json:"features,omitempty"`
	GPUs     []GPUStatus `json:"gpus"`
	// Memory is elastic memory per GPU (GPUs where a group borrowed).
	Memory []MemoryGPUStatus `json:"memory,omitempty"`
}

// MemoryGPUStatus is one GPU's elastic memory.
type MemoryGPUStatus struct {
	UUID   string              `json:"uuid"`
	Groups []MemoryGroupStatus `json:"groups"`
}

// MemoryGroupStatus is one group's elastic memory on one GPU, in bytes.
type MemoryGroupStatus struct {
	Group      string `json:"group"`
	Min        uint64 `json:"min"`
	Max        uint64 `json:"max"`
	Spill      bool   `json:"spill,omitempty"`
	Used       uint64 `json:"used"`
	Guaranteed uint64 `json:"guaranteed"` // on the device, up to min
	Borrowed   uint64 `json:"borrowed"`   // on the device, past min
	Spilled    uint64 `json:"spilled"`    // in host memory
	Allowance  uint64 `json:"allowance"`  // min plus lent
}

// GPUStatus is one GPU's groups.
type GPUStatus struct {
	UUID   string           `json:"uuid"`
	Holder string           `json:"holder,omitempty"`
	Groups []GroupGPUStatus `json:"groups"`
}

// GroupGPUStatus is one group on one GPU.
type GroupGPUStatus struct {
	Group    string  `json:"group"`
	Priority string  `json:"priority"`
	SliceNs  int64   `json:"sliceNs"`
	Share    float64 `json:"share,omitempty"` // configured share of the period, if set
	// ShareMax is the group's ceiling on its share of the GPU's time (share.max), if set.
	ShareMax float64 `json:"shareMax,omitempty"`
	// Expected is the share of GPU time the group gets when every group here
	// is busy (at most its ShareMax).
	Expected      float64 `json:"expected"`
	AchievedNs    int64   `json:"achievedNs"`
	AchievedShare float64 `json:"achievedShare"` // over the last status interval window
	BankedNs      int64   `json:"bankedNs"`
	DebtNs        int64   `json:"debtNs,omitempty"`
	Members       int     `json:"members"`
	Waiting       bool    `json:"waiting,omitempty"`
	Holding       bool    `json:"holding,omitempty"`
	Grants        uint64  `json:"grants"`
	// Renewals: grants renewed before their end because no other group waited.
	Renewals uint64 `json:"renewals,omitempty"`
	// Hand-overs after a revoke and how long past it they came: the GPU work
	// left queued at the end of a slice (or at a preemption), p99 and longest.
	Overruns     uint64 `json:"overruns,omitempty"`
	OverrunP99Ns int64  `json:"overrunP99Ns,omitempty"`
	OverrunMaxNs int64  `json:"overrunMaxNs,omitempty"`
	// GrantedNs sums the lengths of the grants handed out; Revokes counts
	// grants the daemon ended (preempted, at their end, or expired).
	GrantedNs int64  `json:"grantedNs"`
	Revokes   uint64 `json:"revokes"`
	MemoryMax uint64 `json:"memoryMax,omitempty"` // per GPU
	// MemoryUsed is what the group holds on this GPU; MemoryRefused counts
	// its allocations refused at the limit on this GPU.
	MemoryUsed    uint64 `json:"memoryUsed,omitempty"`
	MemoryRefused uint64 `json:"memoryRefused,omitempty"`
}

// FeatureGenerations: the daemon acknowledges each settings generation it
// applied (group.FileApplied); an older one applies settings without a word.
const FeatureGenerations = "settings-generations"

// MaxBytes bounds what Read reads of status.json (the daemon itself reads it
// when it stops, the node agent each time it publishes): a status with
// thousands of groups on every GPU is a few MiB.
const MaxBytes = 64 << 20

// ErrTooLarge: status.json is over MaxBytes.
var ErrTooLarge = errors.New("node status too large")

// Read reads a daemon's status.json in runDir: a regular file (not through a
// link, never waiting on a FIFO) of at most MaxBytes.
func Read(runDir string) (*Status, error) {
	f, err := group.OpenFile(Path(runDir), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("read node status: %w", err)
	}
	b, rerr := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err := errors.Join(rerr, f.Close()); err != nil {
		return nil, fmt.Errorf("read node status: %w", err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, Path(runDir), MaxBytes)
	}
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parse %s: %w", Path(runDir), err)
	}
	if st.Version != Version {
		return nil, fmt.Errorf("%s: status version %d, this gpuslice reads %d", Path(runDir), st.Version, Version)
	}
	return &st, nil
}
