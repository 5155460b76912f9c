package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

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

// RemoveHostFilesIfUnused removes what the agent put on the host (the
// library copy, and the run directory's groups) once no pod bound to this
// node holds a GPU assignment any more: an agent stopped for an upgrade
// while GPU pods run leaves them their files; one stopped for good after
// its GPU pods are gone leaves nothing. It reports whether it removed them.
func RemoveHostFilesIfUnused(ctx context.Context, cfg Config) (bool, error) {
	cs, _, err := clients(cfg.Kubeconfig)
	if err != nil {
		return false, err
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + cfg.NodeName})
	if err != nil {
		return false, fmt.Errorf("list pods on %s: %w", cfg.NodeName, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[api.AnnotationAssignment] != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			klog.FromContext(ctx).Info("GPU pods remain: host files kept", "pod", klog.KObj(p))
			return false, nil
		}
	}
	var errs []error
	for _, p := range []string{cfg.Library, filepath.Join(cfg.RunDir, "groups")} {
		if p == "" {
			continue
		}
		if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return true, errors.Join(errs...)
}
