package sched

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// Plugin args identity: the args object in a KubeSchedulerConfiguration's
// pluginConfig may carry these; if it does they must match.
const (
	ArgsAPIVersion = api.Group + "/v1alpha1"
	ArgsKind       = "GPUSliceArgs"
)

// Defaults of Args.
const (
	DefaultPlacement            = api.PlacementBinpack
	DefaultUtilizationThreshold = 95
	DefaultHeartbeatTimeout     = 60 * time.Second
	DefaultCandidateNodes       = 32
)

// Args are the plugin's versioned arguments (gpuslice.io/v1alpha1 GPUSliceArgs).
type Args struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	// Placement is the cluster default: first-fit, binpack or spread.
	Placement api.Placement `json:"placement,omitempty"`
	// UtilizationThreshold (percent, 0-100): GPUs measured above it get no
	// new pods. nil means DefaultUtilizationThreshold; 100 disables.
	UtilizationThreshold *int32 `json:"utilizationThreshold,omitempty"`
	// AllowUnscheduledProcesses places pods on GPUs busy with processes
	// that no scheduled pod owns (skipped by default).
	AllowUnscheduledProcesses bool `json:"allowUnscheduledProcesses,omitempty"`
	// HeartbeatTimeout: nodes whose GPUNode heartbeat is older are skipped.
	HeartbeatTimeout *metav1.Duration `json:"heartbeatTimeout,omitempty"`
	// CandidateNodes: PreFilter ranks every node by free GPU capacity and
	// placement score and hands the scheduler only this many best ones to
	// filter and score (instead of a sample of the cluster). nil means
	// DefaultCandidateNodes; 0 hands over all nodes.
	CandidateNodes *int32 `json:"candidateNodes,omitempty"`
}

// Settings are the validated plugin settings.
type Settings struct {
	Alloc          alloc.Config
	CandidateNodes int
}

// DecodeArgs strictly decodes the plugin args (JSON or YAML inside a
// runtime.Unknown, or an *Args), applies defaults and validates.
func DecodeArgs(obj runtime.Object) (Settings, error) {
	var a Args
	switch o := obj.(type) {
	case nil:
	case *Args:
		a = *o
	case *runtime.Unknown:
		if err := strictDecode(o.Raw, &a); err != nil {
			return Settings{}, fmt.Errorf("%s args: %w", Name, err)
		}
	default:
		return Settings{}, fmt.Errorf("%s args: unsupported type %T", Name, obj)
	}
	c, err := a.Config()
	if err != nil {
		return Settings{}, err
	}
	st := Settings{Alloc: c, CandidateNodes: DefaultCandidateNodes}
	if a.CandidateNodes != nil {
		if *a.CandidateNodes < 0 {
			return Settings{}, fmt.Errorf("%s args: candidateNodes %d: want >= 0", Name, *a.CandidateNodes)
		}
		st.CandidateNodes = int(*a.CandidateNodes)
	}
	return st, nil
}

func strictDecode(raw []byte, into *Args) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode: trailing data")
	}
	return nil
}

// Config applies defaults, validates and returns the allocator config.
func (a Args) Config() (alloc.Config, error) {
	if a.APIVersion != "" && a.APIVersion != ArgsAPIVersion {
		return alloc.Config{}, fmt.Errorf("%s args: apiVersion %q, want %q", Name, a.APIVersion, ArgsAPIVersion)
	}
	if a.Kind != "" && a.Kind != ArgsKind {
		return alloc.Config{}, fmt.Errorf("%s args: kind %q, want %q", Name, a.Kind, ArgsKind)
	}
	c := alloc.Config{
		DefaultPlacement:          a.Placement,
		UtilizationThreshold:      DefaultUtilizationThreshold,
		AllowUnscheduledProcesses: a.AllowUnscheduledProcesses,
		HeartbeatTimeout:          DefaultHeartbeatTimeout,
	}
	if c.DefaultPlacement == "" {
		c.DefaultPlacement = DefaultPlacement
	}
	if a.UtilizationThreshold != nil {
		c.UtilizationThreshold = *a.UtilizationThreshold
	}
	if a.HeartbeatTimeout != nil {
		c.HeartbeatTimeout = a.HeartbeatTimeout.Duration
	}
	if err := c.Validate(); err != nil {
		return alloc.Config{}, fmt.Errorf("%s args: %w", Name, err)
	}
	return c, nil
}

// DeepCopyObject implements runtime.Object so Args can be passed in-process.
func (a *Args) DeepCopyObject() runtime.Object {
	out := *a
	if a.UtilizationThreshold != nil {
		v := *a.UtilizationThreshold
		out.UtilizationThreshold = &v
	}
	if a.HeartbeatTimeout != nil {
		v := *a.HeartbeatTimeout
		out.HeartbeatTimeout = &v
	}
	if a.CandidateNodes != nil {
		v := *a.CandidateNodes
		out.CandidateNodes = &v
	}
	return &out
}

// GetObjectKind implements runtime.Object.
func (a *Args) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
