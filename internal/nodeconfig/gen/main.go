// Command gen writes the node settings table of docs/node-agent.md from
// agent.NodeSettings (nodeconfig.SettingsTable).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/nodeconfig"
)

func main() {
	path := flag.String("doc", "../../docs/node-agent.md", "the document holding the table")
	flag.Parse()
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := nodeconfig.ReplaceTable(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}
