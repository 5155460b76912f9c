// Package kubectlplugin is `kubectl gpuslice` (cmd/kubectl-gpuslice): GPU
// usage per node and GPU from the GPUNode table and the pods' assignments,
// and which pod holds which share. It only reads, with the caller's
// kubeconfig (the standard kubectl flags, k8s.io/cli-runtime).
package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// Binary is the plugin's executable name; kubectl runs it as `kubectl gpuslice`.
const Binary = "kubectl-gpuslice"

// UsageError marks a caller's mistake (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// clients are what the commands read the cluster through.
type clients struct {
	core     kubernetes.Interface
	gpuNodes versioned.Interface
}

// NewCommand returns `kubectl gpuslice` with its subcommands; now is the clock.
func NewCommand(streams genericiooptions.IOStreams, now func() time.Time) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	connect := func() (*clients, error) {
		cfg, err := flags.ToRESTConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		core, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		gc, err := versioned.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("GPUNode client: %w", err)
		}
		return &clients{core: core, gpuNodes: gc}, nil
	}
	root := &cobra.Command{
		Use:           "gpuslice",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gpuslice"},
		Short:         "GPU usage per node and GPU, and which pod holds which GPU share (gpuslice)",
		Version:       version.String(Binary),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &UsageError{Err: fmt.Errorf("unknown command %q (see 'kubectl gpuslice --help')", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.Flags().Bool("version", false, "print the version")
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: fmt.Errorf("%s: %w", c.Name(), err)}
	})
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(topCommand(streams, connect, now), podsCommand(streams, flags, connect))
	return root
}

func topCommand(streams genericiooptions.IOStreams, connect func() (*clients, error), now func() time.Time) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "top [NODE...] [-o json|yaml|wide]",
		Short: "per node and GPU: units and memory booked by pods / capacity, utilization, sharing mode, state",
		Long: "Per node and GPU: units and memory booked by the pods gpuslice placed there, against the capacity the\n" +
			"node agent publishes in its GPUNode row, with the GPU's utilization, sharing mode, node state and health.",
	}
	out := output.AddFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		c, err := connect()
		if err != nil {
			return err
		}
		nodes, err := listGPUNodes(cmd.Context(), c.gpuNodes, names)
		if err != nil {
			return err
		}
		pods, err := c.core.CoreV1().Pods(metav1.NamespaceAll).List(cmd.Context(), metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		doc := Top(nodes, pods.Items)
		if err := heartbeats(cmd.Context(), c.core, doc.Nodes); err != nil {
			return err
		}
		return WriteTop(streams.Out, doc, *out, now())
	}
	return cmd
}

// heartbeats sets each node's heartbeat to its agent's last Lease renewal
// (zero when it has none).
func heartbeats(ctx context.Context, cs kubernetes.Interface, nodes []TopNode) error {
	leases, err := cs.CoordinationV1().Leases(api.LeaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: api.LabelLeaseNode})
	if err != nil {
		return fmt.Errorf("list node agent Leases: %w", err)
	}
	renewed := map[string]time.Time{}
	for _, le := range leases.Items {
		if node := le.Labels[api.LabelLeaseNode]; node != "" && le.Name == api.LeaseName(node) && le.Spec.RenewTime != nil {
			renewed[node] = le.Spec.RenewTime.Time
		}
	}
	for i := range nodes {
		nodes[i].Heartbeat = renewed[nodes[i].Name]
	}
	return nil
}

func podsCommand(streams genericiooptions.IOStreams, flags *genericclioptions.ConfigFlags, connect func() (*clients, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pods [-n NAMESPACE | -A] [-o json|yaml|wide]",
		Short: "which pod (and container) holds which GPU share, on which node",
	}
	all := cmd.Flags().BoolP("all-namespaces", "A", false, "pods of every namespace")
	out := output.AddFlag(cmd.Flags())
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return &UsageError{Err: fmt.Errorf("pods: unexpected arguments %q", args)}
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ns := metav1.NamespaceAll
		if !*all {
			n, _, err := flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return fmt.Errorf("namespace: %w", err)
			}
			ns = n
		}
		c, err := connect()
		if err != nil {
			return err
		}
		pods, err := c.core.CoreV1().Pods(ns).List(cmd.Context(), metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		return WritePods(streams.Out, Shares(pods.Items), *out)
	}
	return cmd
}

// listGPUNodes reads the GPUNode rows (all, or the named ones).
func listGPUNodes(ctx context.Context, gc versioned.Interface, names []string) ([]v1alpha2.GPUNode, error) {
	list, err := gc.GpusliceV1alpha2().GPUNodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list GPUNodes: %w", err)
	}
	var out []v1alpha2.GPUNode
	for _, g := range list.Items {
		if len(names) == 0 || slices.Contains(names, g.Name) {
			out = append(out, g)
		}
	}
	for _, n := range names {
		if !slices.ContainsFunc(out, func(g v1alpha2.GPUNode) bool { return g.Name == n }) {
			return nil, &UsageError{Err: fmt.Errorf("top: no GPUNode %q", n)}
		}
	}
	return out, nil
}

// Main runs the plugin with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	root := NewCommand(streams, time.Now)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(streams.ErrOut, "%s: %v\n", Binary, err)
		return 2
	default:
		fmt.Fprintf(streams.ErrOut, "%s: %v\n", Binary, err)
		return 1
	}
}
