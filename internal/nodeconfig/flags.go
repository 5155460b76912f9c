package nodeconfig

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/health"
	"github.com/gpuslice/gpuslice/internal/logflags"
	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

// Flag names of the command line itself (not settings).
const (
	FlagConfig  = "config"
	FlagVersion = "version"
	// EnvConfig names the configuration file when --config is not given.
	EnvConfig = "GPUSLICE_NODE_CONFIG"
	// EnvPrefix + a setting flag's name in upper case, "-" as "_", is the
	// flag's environment variable (--slots-per-gpu: GPUSLICE_NODE_SLOTS_PER_GPU).
	EnvPrefix = "GPUSLICE_NODE_"
	// EnvNodeName also sets --node-name (the Kubernetes downward API's usual name).
	EnvNodeName = "NODE_NAME"
)

// EnvName is the environment variable of the setting flag name.
func EnvName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSet is the command line bound to one file's worth of settings.
type flagSet struct {
	fs       *flag.FlagSet
	settings []agent.Setting // in registration order
	config   string
	version  bool
}

// newFlagSet registers every flag on a fresh flag set: --config, --version,
// the logging flags and each node setting (agent.NodeSettings), bound to its
// field of c (the flag's default is c's value).
func newFlagSet(c *v1.NodeConfig) *flagSet {
	f := &flagSet{fs: flag.NewFlagSet("gpuslice-node", flag.ContinueOnError), settings: agent.NodeSettings()}
	f.fs.StringVar(&f.config, FlagConfig, "", "configuration file (apiVersion "+v1.APIVersion+", kind "+v1.Kind+"; default $"+EnvConfig+"); flags and the environment override it")
	f.fs.BoolVar(&f.version, FlagVersion, false, "print the version and exit")
	logflags.BindGoFlags(&c.Logging, f.fs)
	for _, s := range f.settings {
		f.fs.Var(flagValue(s.File(c)), s.Flag, s.Usage+" (file: "+s.Field+"; env: "+EnvName(s.Flag)+")")
	}
	return f
}

// flagValue is a file form's field as a flag value.
func flagValue(p any) flag.Value {
	switch p := p.(type) {
	case *string:
		return (*stringValue)(p)
	case *v1.Duration: // a string parsed on conversion (agent.Setting.ToConfig)
		return (*stringValue)(p)
	case *int:
		return (*intValue)(p)
	case *bool:
		return (*boolValue)(p)
	case *[]string:
		return (*listValue)(p)
	case *[]uint64:
		return (*xidsValue)(p)
	}
	panic(fmt.Sprintf("nodeconfig: no flag value for a %T field", p)) // the settings are static; TestSettings binds every one
}

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return numError(err)
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return numError(err)
	}
	*v = boolValue(b)
	return nil
}
func (v *boolValue) String() string   { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) IsBoolFlag() bool { return true }

// listValue is a comma-separated list; empty items are dropped.
type listValue []string

func (v *listValue) Set(s string) error {
	*v = nil
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d != "" {
			*v = append(*v, d)
		}
	}
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }

// xidsValue is a comma-separated list of XIDs.
type xidsValue []uint64

func (v *xidsValue) Set(s string) error {
	x, err := health.ParseXIDs(s)
	if err != nil {
		return err
	}
	*v = x
	return nil
}

func (v *xidsValue) String() string {
	s := make([]string, len(*v))
	for i, x := range *v {
		s[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(s, ",")
}

// numError drops strconv's "strconv.ParseInt: parsing" prefix.
func numError(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}
