package logflags

import (
	"flag"
	"testing"

	"github.com/spf13/pflag"
)

func TestFlags(t *testing.T) {
	cases := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"-v=3"}, true},
		{[]string{"-v", "2", "--vmodule", "gate*=4"}, true},
		{[]string{"--logging-format", "json"}, true},
		{[]string{"--logging-format", "xml"}, false},
		{[]string{"-v", "many"}, false},
	}
	for _, c := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		cfg := AddGoFlags(fs)
		err := fs.Parse(c.args)
		if err == nil {
			err = Validate(cfg)
		}
		if (err == nil) != c.ok {
			t.Errorf("go flags %q: %v, want ok %v", c.args, err, c.ok)
		}
		pfs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		pcfg := AddFlags(pfs)
		err = pfs.Parse(c.args)
		if err == nil {
			err = Validate(pcfg)
		}
		if (err == nil) != c.ok {
			t.Errorf("pflags %q: %v, want ok %v", c.args, err, c.ok)
		}
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	cfg := AddFlags(fs)
	if err := fs.Parse([]string{"-v", "5"}); err != nil || cfg.Verbosity != 5 {
		t.Errorf("-v 5: verbosity %d, %v", cfg.Verbosity, err)
	}
}
