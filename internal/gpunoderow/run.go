package gpunoderow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// Config configures a standalone publisher (gpuslice-publisher).
type Config struct {
	Kubeconfig string // "" : in-cluster or $KUBECONFIG
	Node       string
	Period     time.Duration
	Driver     gpu.Mode
	SimDir     string // directory of the simulated libnvidia-ml.so.1
	State      v1alpha2.NodeState
	Once       bool // publish once and exit
}

// Validate checks the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if c.Period < time.Second {
		errs = append(errs, fmt.Errorf("period %s: want at least 1s", c.Period))
	}
	switch c.State {
	case v1alpha2.NodeWorking, v1alpha2.NodeDraining, v1alpha2.NodeNotReady:
	default:
		errs = append(errs, fmt.Errorf("state %q: want Working, Draining or NotReady", c.State))
	}
	return errors.Join(errs...)
}

// Run opens the GPU driver (real or simulated) and publishes the node's row
// every period until ctx ends, or once.
func Run(ctx context.Context, c Config) (err error) {
	if err := c.Validate(); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.Kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	gc, err := versioned.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("GPUNode client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	drv, err := gpu.OpenDriver(c.Driver, c.SimDir)
	if err != nil {
		return fmt.Errorf("GPU driver: %w", err)
	}
	defer func() {
		if serr := drv.NVML.Shutdown(); serr != nil && err == nil {
			err = fmt.Errorf("close NVML: %w", serr)
		}
	}()
	klog.FromContext(ctx).Info("publishing GPUNode", "node", c.Node, "period", c.Period, "simulated", drv.Simulated, "driver", drv.Version)
	p := &Publisher{Client: gc, Node: c.Node, GPUs: NVMLReader{NVML: drv.NVML}, Held: PodHoldings{Client: cs, Node: c.Node}, Leases: cs.CoordinationV1(),
		State: func() (v1alpha2.NodeState, string) { return c.State, "" }, Clock: clock.RealClock{}, Period: c.Period}
	if c.Once {
		return p.PublishOnce(ctx)
	}
	return p.Run(ctx)
}
