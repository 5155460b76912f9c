// Package version is the version every gpuslice binary reports (--version,
// and in its log at start). It is stamped at build time by the Makefile's
// GO_LDFLAGS (-X github.com/gpuslice/gpuslice/internal/version.version=...).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is set by the linker; a plain `go build` reports "dev".
var version = "dev"

// Get returns the stamped version ("dev" when not stamped).
func Get() string {
	if v := strings.TrimSpace(version); v != "" {
		return v
	}
	return "dev"
}

// String is the one-line report of `<binary> --version`:
// "<binary> <version> (<go version>, <os>/<arch>[, commit <rev>])".
func String(binary string) string {
	s := fmt.Sprintf("%s %s (%s, %s/%s", binary, Get(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range info.Settings {
			if kv.Key == "vcs.revision" && kv.Value != "" {
				s += ", commit " + kv.Value
			}
		}
	}
	return s + ")"
}

// Requested reports whether args ask for the version: --version or
// -version, alone or =true (the flag forms Go's flag package and pflag accept).
func Requested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--version", "-version", "--version=true", "-version=true":
			return true
		case "--":
			return false
		}
	}
	return false
}
