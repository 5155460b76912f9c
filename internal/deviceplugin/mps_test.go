package deviceplugin

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpuset"
	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestResponseMPS(t *testing.T) {
	gpus := map[string]gpuset.GPU{"GPU-a": {Index: 0, UUID: "GPU-a", Minor: 0, Healthy: true}, "GPU-b": {Index: 1, UUID: "GPU-b", Minor: 1, Healthy: true}}
	in := Inject{DevRoot: "/dev", MPS: map[string]MPSGPU{"GPU-b": {PipeDirs: []string{"/run/gpuslice/mps/GPU-b/0/pipe"}, ServerUnits: 96}}}
	cases := []struct {
		name    string
		gpus    []api.GPUAssignment
		want    map[string]string // envs ("" = must be absent)
		wantErr string
	}{
		{name: "timeslice GPU: no MPS", gpus: []api.GPUAssignment{{UUID: "GPU-a", Units: 25}},
			want: map[string]string{"CUDA_MPS_PIPE_DIRECTORY": "", "GPUSLICE_GATE": ""}},
		{name: "25 units and 10 GiB on mps", gpus: []api.GPUAssignment{{UUID: "GPU-b", Units: 25, MemoryBytes: 10 << 30}},
			want: map[string]string{"CUDA_MPS_PIPE_DIRECTORY": "/run/gpuslice/mps/GPU-b/0/pipe", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "27",
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M", "GPUSLICE_GATE": "off"}},
		{name: "whole mps GPU", gpus: []api.GPUAssignment{{UUID: "GPU-b", Exclusive: true}},
			want: map[string]string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ""}},
		{name: "two GPUs with an mps one", gpus: []api.GPUAssignment{{UUID: "GPU-a", Exclusive: true}, {UUID: "GPU-b", Exclusive: true}},
			wantErr: "an MPS client uses one GPU"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := in.Response(Candidate{Namespace: "ns", Name: "p", Container: "c", GPUs: tc.gpus}, gpus, "k8s-p-c")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if got, ok := r.Envs[k]; v == "" && ok || v != "" && got != v {
					t.Errorf("%s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			if tc.want["CUDA_MPS_PIPE_DIRECTORY"] != "" {
				found := false
				for _, m := range r.Mounts {
					found = found || m.HostPath == tc.want["CUDA_MPS_PIPE_DIRECTORY"] && m.ContainerPath == m.HostPath
				}
				if !found {
					t.Errorf("pipe directory not mounted: %v", r.Mounts)
				}
			}
		})
	}
}
