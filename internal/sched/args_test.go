package sched

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/utils/ptr"

	configv1 "github.com/gpuslice/gpuslice/internal/sched/apis/config/v1"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// loadArgs loads a KubeSchedulerConfiguration with args as the GPUSlice
// pluginConfig through kube-scheduler's own loader and returns the settings.
func loadArgs(t *testing.T, args string) (Settings, error) {
	t.Helper()
	if err := RegisterArgs(); err != nil {
		t.Fatal(err)
	}
	cfg := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		"profiles:\n- schedulerName: gpuslice\n  plugins:\n    multiPoint:\n      enabled: [{name: GPUSlice}]\n"
	if args != "" {
		cfg += "  pluginConfig:\n  - name: GPUSlice\n    args: " + args + "\n"
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := options.LoadConfigFromFile(klog.Background(), path)
	if err != nil {
		return Settings{}, err
	}
	for _, p := range c.Profiles {
		for _, pc := range p.PluginConfig {
			if pc.Name == Name {
				return DecodeArgs(pc.Args)
			}
		}
	}
	t.Fatal("no GPUSlice pluginConfig after loading (defaults not registered)")
	return Settings{}, nil
}

func TestArgsThroughSchedulerLoader(t *testing.T) {
	defaults := Settings{CandidateNodes: DefaultCandidateNodes}
	defaults.Alloc.DefaultPlacement, defaults.Alloc.UtilizationThreshold = DefaultPlacement, DefaultUtilizationThreshold
	defaults.Alloc.HeartbeatTimeout = DefaultHeartbeatTimeout
	for name, tc := range map[string]struct {
		args string
		want Settings
	}{
		"absent":  {"", defaults},
		"empty":   {"{}", defaults},
		"typed":   {"{apiVersion: kubescheduler.config.k8s.io/v1, kind: GPUSliceArgs}", defaults},
		"spread":  {"{placement: spread, utilizationThreshold: 0, heartbeatTimeout: 5s, allowUnscheduledProcesses: true, candidateNodes: 0}", Settings{}},
		"partial": {`{"placement": "first-fit"}`, Settings{}},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := loadArgs(t, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			switch name {
			case "spread":
				c := st.Alloc
				if st.CandidateNodes != 0 || c.DefaultPlacement != api.PlacementSpread || c.UtilizationThreshold != 0 || c.HeartbeatTimeout != 5*time.Second || !c.AllowUnscheduledProcesses {
					t.Fatalf("settings %+v", st)
				}
			case "partial":
				if st.Alloc.DefaultPlacement != api.PlacementFirstFit || st.Alloc.UtilizationThreshold != DefaultUtilizationThreshold {
					t.Fatalf("settings %+v", st)
				}
			default:
				if st != tc.want {
					t.Fatalf("settings %+v, want %+v", st, tc.want)
				}
			}
		})
	}
}

func TestArgsRefused(t *testing.T) {
	for name, tc := range map[string]struct{ args, want string }{
		"unknown field":   {`{placment: spread}`, "unknown field"},
		"duplicate field": {`{placement: spread, placement: binpack}`, "placement"},
		"old group":       {`{apiVersion: gpuslice.io/v1alpha1, kind: GPUSliceArgs}`, "GPUSliceArgs"},
		"kind":            {`{apiVersion: kubescheduler.config.k8s.io/v1, kind: Other}`, "Other"},
		"type":            {`{utilizationThreshold: high}`, "utilizationThreshold"},
		"placement":       {`{placement: tight}`, "placement"},
		"threshold":       {`{utilizationThreshold: 150}`, "utilizationThreshold"},
		"timeout":         {`{heartbeatTimeout: -1s}`, "heartbeatTimeout"},
		"candidates":      {`{candidateNodes: -1}`, "candidateNodes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadArgs(t, tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to name %q", err, tc.want)
			}
		})
	}
}

func TestDecodeArgsInProcess(t *testing.T) {
	st, err := DecodeArgs(&configv1.GPUSliceArgs{UtilizationThreshold: ptr.To[int32](50)})
	if err != nil || st.Alloc.UtilizationThreshold != 50 || st.Alloc.DefaultPlacement != DefaultPlacement {
		t.Fatalf("typed: %+v %v", st, err)
	}
	if _, err := DecodeArgs(&configv1.GPUSliceArgs{CandidateNodes: ptr.To[int32](-1)}); err == nil || !strings.Contains(err.Error(), Name+" args") {
		t.Fatalf("err = %v", err)
	}
}
