package hotplug

import (
	"errors"
	"testing"

	"github.com/gpuslice/gpuslice/internal/devices"
)

func TestOCIDeviceRules(t *testing.T) {
	cfg := `{"ociVersion":"1.1.0","linux":{"resources":{"devices":[
		{"allow":false,"access":"rwm"},
		{"allow":true,"type":"c","major":1,"minor":3,"access":"rwm"},
		{"allow":true,"type":"c","access":"m"},
		{"allow":true,"type":"c","major":195,"minor":0,"access":"rw"}]}}}`
	rules, err := OCIDeviceRules([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	e, err := devices.FromRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1 := devices.Device{Type: devices.TypeChar, Major: 195, Minor: 0}, devices.Device{Type: devices.TypeChar, Major: 195, Minor: 1}
	if !e.Allows(gpu0, devices.Read|devices.Write) || e.Allows(gpu1, devices.Read) || !e.Allows(gpu1, devices.Mknod) {
		t.Fatalf("rules %q", e.List())
	}
	for _, bad := range []string{`{`, `{"linux":{"resources":{"devices":[{"type":"cc"}]}}}`,
		`{"linux":{"resources":{"devices":[{"type":"c","access":"x"}]}}}`, `{"linux":{"resources":{"devices":[{"type":"c","major":-5}]}}}`} {
		if _, err := OCIDeviceRules([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		} else if bad != `{` && !errors.Is(err, devices.ErrInvalidRule) {
			t.Errorf("%s: %v does not wrap ErrInvalidRule", bad, err)
		}
	}
}
