package sched

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/sched/apis/config"
	configv1 "github.com/gpuslice/gpuslice/internal/sched/apis/config/v1"
)

// Settings are the validated plugin settings.
type Settings struct {
	Alloc          alloc.Config
	CandidateNodes int
}

// RegisterArgs registers GPUSliceArgs (kubescheduler.config.k8s.io/v1 and
// internal) in kube-scheduler's configuration scheme, which its loader
// decodes with (strictly: unknown and duplicate fields are errors), and in
// its plugin-args scheme, which defaults them and converts them to the
// internal type the plugin receives. Call it before the configuration is
// loaded; registering again is harmless.
func RegisterArgs() error {
	for _, s := range []*runtime.Scheme{schedscheme.Scheme, schedconfigv1.GetPluginArgConversionScheme()} {
		if err := config.AddToScheme(s); err != nil {
			return fmt.Errorf("register %s args: %w", Name, err)
		}
		if err := configv1.AddToScheme(s); err != nil {
			return fmt.Errorf("register %s args: %w", Name, err)
		}
	}
	return nil
}

// DecodeArgs validates the plugin args kube-scheduler hands over (the
// internal type, decoded, defaulted and converted by its loader; nil or the
// versioned type when the plugin is built in-process) and returns the
// settings.
func DecodeArgs(obj runtime.Object) (Settings, error) {
	var a config.GPUSliceArgs
	switch o := obj.(type) {
	case *config.GPUSliceArgs:
		a = *o
	case nil:
		if err := defaulted(&configv1.GPUSliceArgs{}, &a); err != nil {
			return Settings{}, err
		}
	case *configv1.GPUSliceArgs:
		if err := defaulted(o.DeepCopy(), &a); err != nil {
			return Settings{}, err
		}
	default:
		return Settings{}, fmt.Errorf("%s args: unsupported type %T (args not registered: RegisterArgs)", Name, obj)
	}
	if err := config.ValidateGPUSliceArgs(field.NewPath("args"), &a); err != nil {
		return Settings{}, fmt.Errorf("%s args: %w", Name, err)
	}
	c := alloc.Config{
		DefaultPlacement:          a.Placement,
		UtilizationThreshold:      a.UtilizationThreshold,
		AllowUnscheduledProcesses: a.AllowUnscheduledProcesses,
		HeartbeatTimeout:          a.HeartbeatTimeout.Duration,
	}
	if err := c.Validate(); err != nil {
		return Settings{}, fmt.Errorf("%s args: %w", Name, err)
	}
	return Settings{Alloc: c, CandidateNodes: int(a.CandidateNodes)}, nil
}

func defaulted(in *configv1.GPUSliceArgs, out *config.GPUSliceArgs) error {
	configv1.SetDefaultsGPUSliceArgs(in)
	if err := configv1.ConvertToInternal(in, out); err != nil {
		return fmt.Errorf("%s args: %w", Name, err)
	}
	return nil
}

// Defaults of the args (configv1).
const (
	DefaultPlacement            = configv1.DefaultPlacement
	DefaultUtilizationThreshold = configv1.DefaultUtilizationThreshold
	DefaultHeartbeatTimeout     = configv1.DefaultHeartbeatTimeout
	DefaultCandidateNodes       = configv1.DefaultCandidateNodes
)
