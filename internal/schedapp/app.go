// Package schedapp is gpuslice-scheduler's command: kube-scheduler's own
// options, Setup and Run, with the gpuslice plugin registered, --version
// reporting gpuslice's version (and the Kubernetes one it is built on), and
// the plugin told when this replica leads (sched.Leader), so that the resize
// controller (and, with --kueue-admission-check, Kueue's admission check
// gpuslice.io/fits, internal/queuecheck) runs in the leader only.
package schedapp

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/features"

	"github.com/gpuslice/gpuslice/internal/queuecheck"
	"github.com/gpuslice/gpuslice/internal/sched"
	"github.com/gpuslice/gpuslice/internal/version"
	"github.com/gpuslice/gpuslice/pkg/generated/clientset/versioned"
)

// Binary is the command's name.
const Binary = "gpuslice-scheduler"

// NewCommand returns the gpuslice-scheduler command; it runs until ctx ends.
func NewCommand(ctx context.Context) *cobra.Command {
	opts := options.NewOptions()
	var showVersion, kueueCheck bool
	cmd := &cobra.Command{
		Use:  Binary,
		Long: Binary + " is kube-scheduler with the gpuslice plugin compiled in; it takes every kube-scheduler flag.",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Before the configuration is loaded: its loader decodes the
			// plugin's args (GPUSliceArgs) through the registered types.
			if err := sched.RegisterArgs(); err != nil {
				return err
			}
			// gpuslice-scheduler's own default, before --feature-gates
			// (which may turn it on): no nominatedNodeName patch before
			// PreBind (docs/scheduling.md, "Pods with ResourceClaims").
			if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.NominatedNodeNameForExpectation): false}); err != nil {
				return fmt.Errorf("feature gates: %w", err)
			}
			return opts.ComponentGlobalsRegistry.Set()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				fmt.Fprintf(cmd.OutOrStdout(), "%s, kube-scheduler %s\n", version.String(Binary), k8sversion.Get().GitVersion)
				return nil
			}
			return run(ctx, cmd, opts, kueueCheck)
		},
		Args: cobra.NoArgs,
	}
	nfs := opts.Flags
	global := nfs.FlagSet("global")
	global.BoolVar(&showVersion, "version", false, "print the version and exit")
	global.BoolVar(&kueueCheck, "kueue-admission-check", false, "run Kueue's admission check "+queuecheck.ControllerName+
		" (in the leader): Workloads whose containers no GPU can hold are rejected, ClusterQueues with a bad gpuslice quota warned about (docs/queues.md)")
	globalflag.AddGlobalFlags(global, cmd.Name(), logs.SkipLoggingConfigurationFlags())
	fs := cmd.Flags()
	for _, f := range nfs.FlagSets {
		fs.AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, *nfs, cols)
	return cmd
}

func run(ctx context.Context, cmd *cobra.Command, opts *options.Options, kueueCheck bool) error {
	fg := opts.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(opts.Logs, fg); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	cliflag.PrintFlags(cmd.Flags())
	logger := klog.FromContext(ctx)
	logger.Info("starting "+Binary, "version", version.Get(), "kubernetes", k8sversion.Get().GitVersion)
	leader, steering := sched.NewLeader(), sched.NewSteering()
	cc, s, err := app.Setup(ctx, opts, app.WithPlugin(sched.Name, sched.Factory(leader, steering)),
		app.WithPlugin(sched.DRAName, sched.DRAFactory(steering)), app.WithPlugin(sched.QueueSortName, sched.NewQueueSort))
	if err != nil {
		return err
	}
	if mfg, ok := fg.(featuregate.MutableFeatureGate); ok {
		mfg.AddMetrics()
	}
	opts.ComponentGlobalsRegistry.AddMetrics()
	if cc.LeaderElection == nil {
		leader.Lead()
	} else {
		logger.Info("leader election", "lock", cc.LeaderElection.Lock.Describe(), "identity", cc.LeaderElection.Lock.Identity())
		cc.LeaderElection.Lock = &leadingLock{Interface: cc.LeaderElection.Lock, leader: leader}
	}
	if kueueCheck {
		if err := startQueueCheck(ctx, cc.KubeConfig, cc.EventBroadcaster.NewRecorder("gpuslice-queuecheck"), leader.Leading()); err != nil {
			return err
		}
	}
	return app.Run(ctx, cc, s)
}

// startQueueCheck runs Kueue's admission check gpuslice.io/fits once this
// replica leads, for as long as the scheduler runs.
func startQueueCheck(ctx context.Context, cfg *rest.Config, rec events.EventRecorder, leading <-chan struct{}) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kueue admission check: %w", err)
	}
	gc, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kueue admission check: %w", err)
	}
	c := queuecheck.New(queuecheck.Config{Dynamic: dyn, GPUNodes: gc, Events: rec})
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-leading:
		}
		if err := c.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "kueue admission check stopped")
		}
	}()
	return nil
}

// leadingLock tells leader once this replica has written itself into the
// lock as its holder (the leader elector then calls OnStartedLeading).
type leadingLock struct {
	resourcelock.Interface
	leader *sched.Leader
}

func (l *leadingLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.held(ctx, r, l.Interface.Create(ctx, r))
}

func (l *leadingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.held(ctx, r, l.Interface.Update(ctx, r))
}

func (l *leadingLock) held(ctx context.Context, r resourcelock.LeaderElectionRecord, err error) error {
	if err == nil && r.HolderIdentity == l.Identity() {
		select {
		case <-l.leader.Leading():
		default:
			klog.FromContext(ctx).Info("this replica leads", "identity", r.HolderIdentity)
		}
		l.leader.Lead()
	}
	return err
}

// Main runs the command and returns the process exit code.
func Main(ctx context.Context, args []string) int {
	cmd := NewCommand(ctx)
	cmd.SetArgs(args)
	return cli.Run(cmd)
}
