package hotplug

import (
	"encoding/json"
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestSpecDeviceRules(t *testing.T) {
	cfg := `{"ociVersion":"1.1.0","linux":{"resources":{"devices":[
		{"allow":false,"access":"rwm"},
		{"allow":true,"type":"c","major":1,"minor":3,"access":"mwr"},
		{"allow":true,"type":"c","access":"m"},
		{"allow":true,"type":"c","major":195,"minor":0,"access":"rw"}]}}}`
	var spec specs.Spec
	if err := json.Unmarshal([]byte(cfg), &spec); err != nil {
		t.Fatal(err)
	}
	rules, err := SpecDeviceRules(&spec)
	if err != nil {
		t.Fatal(err)
	}
	want := "deny a *:* rwm\nallow c 1:3 rwm\nallow c *:* m\nallow c 195:0 rw\n"
	if got := ruleList(rules); got != want {
		t.Fatalf("rules:\n%s\nwant:\n%s", got, want)
	}
	if r, err := SpecDeviceRules(nil); r != nil || err != nil {
		t.Fatalf("no spec: %v %v", r, err)
	}
	for _, bad := range []string{`{"linux":{"resources":{"devices":[{"type":"cc"}]}}}`,
		`{"linux":{"resources":{"devices":[{"type":"x"}]}}}`,
		`{"linux":{"resources":{"devices":[{"type":"c","access":"x"}]}}}`,
		`{"linux":{"resources":{"devices":[{"type":"c","major":-5}]}}}`,
		`{"linux":{"resources":{"devices":[{"type":"c","minor":4294967295}]}}}`} {
		var s specs.Spec
		if err := json.Unmarshal([]byte(bad), &s); err != nil {
			t.Fatal(err)
		}
		if _, err := SpecDeviceRules(&s); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%s: err = %v, want ErrInvalidRule", bad, err)
		}
	}
}

// The runtime defaults keep what runc gives every container usable when the
// program is rebuilt from a kubelet-made OCI config (deny all, the device
// plugin's devices), and never cover a GPU.
func TestRuntimeDefaultRules(t *testing.T) {
	def := RuntimeDefaultRules()
	for _, r := range def {
		if err := CheckRule(*r); err != nil || !r.Allow {
			t.Fatalf("%s: %v", r.CgroupString(), err)
		}
		if (r.Major == 195 || r.Major == -1) && r.Permissions != "m" {
			t.Fatalf("%s covers a GPU", r.CgroupString())
		}
	}
	want := "allow c *:* m\nallow b *:* m\nallow c 136:* rwm\nallow c 1:3 rwm\nallow c 1:5 rwm\nallow c 1:7 rwm\n" +
		"allow c 1:8 rwm\nallow c 1:9 rwm\nallow c 5:0 rwm\nallow c 5:1 rwm\nallow c 5:2 rwm\n"
	if got := ruleList(def); got != want {
		t.Fatalf("defaults:\n%s", got)
	}
}
