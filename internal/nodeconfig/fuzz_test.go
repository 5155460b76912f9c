package nodeconfig

import (
	"os"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/agent"
)

// FuzzDecode: any bytes either decode or fail with an error, never panic;
// what decodes encodes and decodes again to the same settings, and converts
// to an agent configuration or an error.
func FuzzDecode(f *testing.F) {
	if data, err := os.ReadFile("../../docs/examples/node-config.yaml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{"", header, header + "resync: 1s\nresync: 2s\n", header + "daemon: {enabled: 3}\n",
		header + "health: {skipXIDs: [4294967296]}\n", header + "logging: {vmodule: [{filePattern: a, verbosity: 2}]}\n",
		"{\"apiVersion\":\"gpuslice.io/v1alpha1\",\"kind\":\"NodeConfig\",\"sharing\":{\"mode\":\"0=mps\"}}", "a: &a [*a, *a]\n"} {
		f.Add([]byte(s))
	}
	d := agent.DefaultConfig(func(string) string { return "" })
	f.Fuzz(func(t *testing.T, data []byte) {
		n := FromAgent(d)
		if err := Decode(data, &n); err != nil {
			return
		}
		_, _ = ToAgent(n, d)
		out, err := yaml.Marshal(n)
		if err != nil {
			t.Fatalf("encode %+v: %v", n, err)
		}
		m := FromAgent(d)
		if err := Decode(out, &m); err != nil {
			t.Fatalf("re-decode %q: %v", out, err)
		}
		if !reflect.DeepEqual(m, n) {
			t.Fatalf("round trip changed:\n%+v\n%+v", n, m)
		}
	})
}
