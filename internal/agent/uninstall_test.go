package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuslice/gpuslice/internal/gpucdi"
)

// kubeletPods serves the kubelet's pod-resources List with fixed pods.
type kubeletPods struct {
	podresources.UnimplementedPodResourcesListerServer
	pods []*podresources.PodResources
}

func (k *kubeletPods) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	return &podresources.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// servePodResources serves pods on a unix socket (gRPC, as the kubelet does) and returns its path.
func servePodResources(t *testing.T, pods ...*podresources.PodResources) string {
	t.Helper()
	return serveLister(t, &kubeletPods{pods: pods})
}

// serveLister serves srv as the kubelet's pod-resources API on a unix socket
// and returns its path.
func serveLister(t *testing.T, srv podresources.PodResourcesListerServer) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(s, srv)
	go func() { _ = s.Serve(l) }() // ends with Stop
	t.Cleanup(s.Stop)
	return sock
}

func podWith(name, resource string, ids ...string) *podresources.PodResources {
	return &podresources.PodResources{Namespace: "ns", Name: name, Containers: []*podresources.ContainerResources{
		{Name: "main", Devices: []*podresources.ContainerDevices{{ResourceName: resource, DeviceIds: ids}}}}}
}

// TestRemoveHostFilesIfUnused: the kubelet's pod-resources answer decides
// (no API credentials needed): a pod holding gpuslice devices keeps every
// host file; other devices, or none, remove the library, the groups and the
// CDI spec; no kubelet and no API server keeps them (an error).
func TestRemoveHostFilesIfUnused(t *testing.T) {
	for name, tc := range map[string]struct {
		pods    []*podresources.PodResources
		noSock  bool
		removed bool
		err     bool
	}{
		"no pods":            {removed: true},
		"other devices only": {pods: []*podresources.PodResources{podWith("cuda", "nvidia.com/gpu", "GPU-1")}, removed: true},
		"no device ids":      {pods: []*podresources.PodResources{podWith("idle", "gpuslice.io/gpu")}, removed: true},
		"a gpu share":        {pods: []*podresources.PodResources{podWith("a", "nvidia.com/gpu", "x"), podWith("b", "gpuslice.io/gpu", "GPU-1::3")}},
		"a units share":      {pods: []*podresources.PodResources{podWith("u", "gpuslice.io/units", "GPU-1::7")}},
		"no kubelet, no API": {noSock: true, err: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
			dir := t.TempDir()
			cfg := DefaultConfig(func(string) string { return "" })
			cfg.Library, cfg.RunDir = filepath.Join(dir, "lib", "libgpuslice.so"), filepath.Join(dir, "run")
			cfg.CDISpecDir, cfg.CDIKind, cfg.NodeName = filepath.Join(dir, "cdi"), gpucdi.Kind, "n1"
			cfg.Kubeconfig = filepath.Join(dir, "no-kubeconfig")
			cfg.PodResources = filepath.Join(dir, "none.sock")
			if !tc.noSock {
				cfg.PodResources = servePodResources(t, tc.pods...)
			}
			files := []string{cfg.Library, PreloadListPath(cfg), filepath.Join(cfg.RunDir, "groups", "g1", "share"), filepath.Join(cfg.CDISpecDir, gpucdi.SpecName+".yaml")}
			for _, f := range files {
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			removed, err := RemoveHostFilesIfUnused(context.Background(), cfg)
			if removed != tc.removed || (err != nil) != tc.err {
				t.Fatalf("removed %v, err %v; want removed %v, error %v", removed, err, tc.removed, tc.err)
			}
			for _, f := range files {
				if _, err := os.Stat(f); os.IsNotExist(err) != tc.removed {
					t.Errorf("%s: exists %v after removed=%v", f, err == nil, removed)
				}
			}
		})
	}
}
