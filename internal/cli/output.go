package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// APIVersion is the apiVersion of every document `-o json|yaml` prints
// (docs/cli.md). Fields are only ever added within one version; a removed or
// changed field means a new version.
const APIVersion = "cli.gpuslice.io/v1"

// format is an -o value: "" (the default table), wide, json or yaml.
type format string

const (
	formatTable format = ""
	formatWide  format = "wide"
	formatJSON  format = "json"
	formatYAML  format = "yaml"
)

// structured reports whether f prints a document rather than a table.
func (f format) structured() bool { return f == formatJSON || f == formatYAML }

// formatFlag is -o/--output; its value is checked when it is set, so a bad
// format fails before any work is done.
type formatFlag struct{ f *format }

func (v formatFlag) String() string { return string(*v.f) }
func (v formatFlag) Type() string   { return "format" }
func (v formatFlag) Set(s string) error {
	switch f := format(s); f {
	case formatTable, formatWide, formatJSON, formatYAML:
		*v.f = f
		return nil
	}
	return fmt.Errorf("unknown output format %q (want json, yaml or wide)", s)
}

// outputFlag registers -o/--output on fs.
func outputFlag(fs *pflag.FlagSet) *format {
	f := new(format)
	fs.VarP(formatFlag{f}, "output", "o", "output format: json, yaml or wide (default: a table)")
	return f
}

// writeDoc prints v as indented JSON or as YAML.
func writeDoc(w io.Writer, f format, v any) error {
	var b []byte
	var err error
	if f == formatYAML {
		b, err = yaml.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
		b = append(b, '\n')
	}
	if err != nil {
		return fmt.Errorf("encode %s: %w", f, err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// TypeMeta names a document's schema, as Kubernetes objects do.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

func typeMeta(kind string) TypeMeta { return TypeMeta{APIVersion: APIVersion, Kind: kind} }
