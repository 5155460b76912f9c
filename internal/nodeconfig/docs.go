package nodeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/gpuslice/gpuslice/internal/agent"
)

// The markers around the settings table in docs/node-agent.md: what lies
// between them is SettingsTable, written by `go generate ./internal/nodeconfig`
// (TestSettingsTableFresh fails when it is stale).
const (
	TableBegin = "<!-- BEGIN node settings: generated from agent.NodeSettings by `go generate ./internal/nodeconfig`; do not edit -->"
	TableEnd   = "<!-- END node settings -->"
)

// SettingsTable is the docs' table of the node settings, one row per row
// of agent.NodeSettings: its flag, environment variable, file field and help.
func SettingsTable() string {
	var b strings.Builder
	b.WriteString("| flag | environment | file field | what |\n|---|---|---|---|\n")
	for _, s := range agent.NodeSettings() {
		fmt.Fprintf(&b, "| `--%s` | `%s` | `%s` | %s |\n", s.Flag, EnvName(s.Flag), s.Field,
			strings.ReplaceAll(s.Usage, "|", "\\|"))
	}
	fmt.Fprintf(&b, "| `-v`, `--vmodule`, `--logging-format`, ... | | `logging` | logging (Kubernetes' LoggingConfiguration) |\n")
	return b.String()
}

// ReplaceTable returns doc with its settings table (between TableBegin and
// TableEnd) replaced by SettingsTable.
func ReplaceTable(doc []byte) ([]byte, error) {
	begin, end := bytes.Index(doc, []byte(TableBegin)), bytes.Index(doc, []byte(TableEnd))
	if begin < 0 || end < begin {
		return nil, errors.New("no settings table markers (" + TableBegin + " ... " + TableEnd + ")")
	}
	var out bytes.Buffer
	out.Write(doc[:begin+len(TableBegin)])
	out.WriteString("\n" + SettingsTable())
	out.Write(doc[end:])
	return out.Bytes(), nil
}
