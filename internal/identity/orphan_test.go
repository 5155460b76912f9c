package identity

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

func TestParseStateMapping(t *testing.T) {
	for _, c := range []struct {
		line    string
		ok      bool
		deleted bool
		path    string
		ino     uint64
		major   uint32
	}{
		{"7f1c2a000000-7f1c2a0b9000 rw-s 00000000 fd:01 1234 /run/gpuslice/groups/g/" + groupstate.FileName, true, false,
			"/run/gpuslice/groups/g/" + groupstate.FileName, 1234, 0xfd},
		{"7f1c2a000000-7f1c2a0b9000 rw-s 00000000 00:1a 99 /run/x.old/groups/my g/" + groupstate.FileName + " (deleted)", true, true,
			"/run/x.old/groups/my g/" + groupstate.FileName, 99, 0},
		{"7f1c2a000000-7f1c2a0b9000 rw-s 00000000 fd:01 1234 /run/gpuslice/groups/g/other", false, false, "", 0, 0},
		{"7f1c2a000000-7f1c2a0b9000 r-xp 00000000 00:00 0 [vdso]", false, false, "", 0, 0},
		{"7f1c2a000000-7f1c2a0b9000 rw-s 00000000 fd:01 0 /" + groupstate.FileName, false, false, "", 0, 0},
		{"7f1c2a000000-7f1c2a0b9000 rw-s 00000000 zz:01 5 /a/" + groupstate.FileName, false, false, "", 0, 0},
		{"7f1c2a000000-7f1c2a0b9000 rw-s 00000000 fd:01 5 " + groupstate.FileName, false, false, "", 0, 0},
		{"short line", false, false, "", 0, 0},
	} {
		m, ok := parseStateMapping(c.line)
		if ok != c.ok || (ok && (m.deleted != c.deleted || m.path != c.path || m.ino != c.ino || m.major != c.major)) {
			t.Errorf("%q: %+v %v, want ok=%v deleted=%v path=%q ino=%d major=%d", c.line, m, ok, c.ok, c.deleted,
				c.path, c.ino, c.major)
		}
	}
}
