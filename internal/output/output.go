// Package output is the -o flag of gpuslice's command lines (gpuslice and
// kubectl gpuslice): a table for people, a wide table, or a versioned JSON or
// YAML document (docs/cli.md).
package output

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// APIVersion is the apiVersion of every document -o json|yaml prints. Fields
// are only ever added within one version; a removed or changed field means a
// new version.
const APIVersion = "cli.gpuslice.io/v1"

// Format is an -o value: "" (the default table), wide, json or yaml.
type Format string

// The formats.
const (
	Table Format = ""
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Structured reports whether f prints a document rather than a table.
func (f Format) Structured() bool { return f == JSON || f == YAML }

// Value is the -o flag's pflag.Value; Set checks the format, so a bad one
// fails at parsing, before any work is done.
type Value struct{ F *Format }

func (v Value) String() string { return string(*v.F) }

// Type names the value in --help.
func (v Value) Type() string { return "format" }

// Set parses s.
func (v Value) Set(s string) error {
	switch f := Format(s); f {
	case Table, Wide, JSON, YAML:
		*v.F = f
		return nil
	}
	return fmt.Errorf("unknown output format %q (want json, yaml or wide)", s)
}

// AddFlag registers -o/--output on fs.
func AddFlag(fs *pflag.FlagSet) *Format {
	f := new(Format)
	fs.VarP(Value{f}, "output", "o", "output format: json, yaml or wide (default: a table)")
	return f
}

// Write prints v as indented JSON or as YAML.
func Write(w io.Writer, f Format, v any) error {
	var b []byte
	var err error
	if f == YAML {
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

// Meta is the TypeMeta of a document of kind.
func Meta(kind string) TypeMeta { return TypeMeta{APIVersion: APIVersion, Kind: kind} }
