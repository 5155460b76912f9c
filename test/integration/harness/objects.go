package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

// RepoRoot walks up from the working directory to the gpuslice module root.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "crds")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("repo root: no deploy/crds above the working directory")
		}
		dir = parent
	}
}

// InstallCRDs creates the GPUNode CRD from deploy/crds and waits until it is
// established.
func (cp *ControlPlane) InstallCRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "crds", "gpuslice.io_gpunodes.yaml"))
	if err != nil {
		return fmt.Errorf("read CRD: %w", err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return fmt.Errorf("decode CRD: %w", err)
	}
	c, err := apiextclient.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("apiextensions client: %w", err)
	}
	if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		got, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextv1.Established && cond.Status == apiextv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// GPUNodeName is the CRD name of the GPUNode table.
const GPUNodeName = v1alpha2.GPUNodeResource + "." + api.Group
