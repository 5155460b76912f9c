// Command gen writes the C header of the gpuslice socket protocol
// (include/gpuslice/proto.h) from the Go definitions in internal/proto.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/proto"
)

func main() {
	out := flag.String("o", proto.HeaderPath, "output file")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(1)
	}
}

func run(out string) error {
	h, err := proto.CHeader()
	if err != nil {
		return fmt.Errorf("render header: %w", err)
	}
	if err := os.WriteFile(out, h, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}
