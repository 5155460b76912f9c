package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// RunInstalled is Run with the library installed from src first and, when
// the agent is asked to stop (ctx ends), the host files removed if no GPU
// pod is left on the node (RemoveHostFilesIfUnused).
func RunInstalled(ctx context.Context, cfg Config, env map[string]string, src string) error {
	if err := InstallLibrary(src, cfg.Library); err != nil {
		return err
	}
	err := Run(ctx, cfg, env)
	if ctx.Err() == nil {
		return err // a part failed: the agent comes back and needs its files
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	removed, rerr := RemoveHostFilesIfUnused(cctx, cfg)
	klog.FromContext(ctx).Info("stopped", "hostFilesRemoved", removed)
	return errors.Join(err, rerr)
}

// InstallLibrary copies src (libgpuslice.so in the agent's image) to dst on
// the host, where the device plugin's Allocate mounts it from. The copy is
// atomic (a temporary file in dst's directory, then rename): a container
// that mounted the previous copy keeps it, a new one gets the new one.
func InstallLibrary(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install library: %w", err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("install library: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".install-*")
	if err != nil {
		return fmt.Errorf("install library: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name()) // the error says what failed; the temporary file is ours
		}
	}()
	if _, err := io.Copy(tmp, in); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install library %s: %w", dst, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("install library %s: %w", dst, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install library %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install library %s: %w", dst, err)
	}
	return nil
}

// PreloadListPath is the host file the agent writes for containers'
// /etc/ld.so.preload (deviceplugin.ContainerPreload): in its run directory,
// "" when no library is injected.
func PreloadListPath(cfg Config) string {
	if cfg.Library == "" {
		return ""
	}
	return filepath.Join(cfg.RunDir, "ld.so.preload")
}

// WritePreloadList writes path (PreloadListPath) naming the container path
// of the library at host path lib, atomically (a temporary file, then
// rename), readable by every user; nothing when path is "".
func WritePreloadList(path, lib string) (err error) {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write preload list: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".preload-*")
	if err != nil {
		return fmt.Errorf("write preload list: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name()) // the error says what failed; the temporary file is ours
		}
	}()
	_, werr := tmp.WriteString(deviceplugin.PreloadList(lib))
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		return fmt.Errorf("write preload list %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write preload list %s: %w", path, err)
	}
	return nil
}

// RemoveHostFilesIfUnused removes what the agent put on the host (the
// library copy and its preload list, the run directory's groups, its CDI spec) once no pod bound to this
// node holds a GPU assignment any more: an agent stopped for an upgrade
// while GPU pods run leaves them their files; one stopped for good after
// its GPU pods are gone leaves nothing. It reports whether it removed them.
func RemoveHostFilesIfUnused(ctx context.Context, cfg Config) (bool, error) {
	remain, err := gpuPodsRemain(ctx, cfg)
	if err != nil {
		return false, err
	}
	if remain != "" {
		klog.FromContext(ctx).Info("GPU pods remain: host files kept", "pod", remain)
		return false, nil
	}
	var errs []error
	if cfg.CDIKind == gpucdi.Kind {
		if err := gpucdi.Remove(cfg.CDISpecDir); err != nil {
			errs = append(errs, fmt.Errorf("remove the CDI spec: %w", err))
		}
	}
	for _, p := range []string{cfg.Library, PreloadListPath(cfg), filepath.Join(cfg.RunDir, "groups")} {
		if p == "" {
			continue
		}
		if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return true, errors.Join(errs...)
}

// gpuPodsRemain names a pod on this node that still holds gpuslice devices
// ("" when none). The kubelet's pod-resources API answers first: it needs
// no credentials, which a stopping agent may have lost already (helm
// uninstall deletes the ServiceAccount and its RBAC while the DaemonSet's
// pods stop). The API server answers when the kubelet does not.
func gpuPodsRemain(ctx context.Context, cfg Config) (string, error) {
	name, perr := podResourcesHolder(ctx, cfg.PodResources)
	if perr == nil {
		return name, nil
	}
	cs, _, err := clients(cfg.Kubeconfig)
	if err != nil {
		return "", errors.Join(perr, err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + cfg.NodeName})
	if err != nil {
		return "", errors.Join(perr, fmt.Errorf("list pods on %s: %w", cfg.NodeName, err))
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[api.AnnotationAssignment] != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return klog.KObj(p).String(), nil
		}
	}
	return "", nil
}

// podResourcesHolder names a pod the kubelet runs that holds devices of a
// gpuslice.io resource ("" when none).
func podResourcesHolder(ctx context.Context, socket string) (string, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("pod-resources: %w", err)
	}
	defer func() { _ = conn.Close() }() // the List result is what matters
	resp, err := podresources.NewPodResourcesListerClient(conn).List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return "", fmt.Errorf("pod-resources list: %w", err)
	}
	for _, pr := range resp.PodResources {
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				if strings.HasPrefix(d.ResourceName, api.Group+"/") && len(d.DeviceIds) > 0 {
					return pr.Namespace + "/" + pr.Name, nil
				}
			}
		}
	}
	return "", nil
}
