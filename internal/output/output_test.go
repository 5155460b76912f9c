package output

import "testing"

func TestFormatFlag(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Format
		ok   bool
	}{{"json", JSON, true}, {"yaml", YAML, true}, {"wide", Wide, true}, {"", Table, true},
		{"JSON", "", false}, {"table", "", false}, {"jsonpath={.x}", "", false}} {
		var f Format
		err := Value{&f}.Set(c.in)
		if (err == nil) != c.ok || f != c.want {
			t.Errorf("-o %q: %q %v", c.in, f, err)
		}
	}
}
