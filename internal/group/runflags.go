package group

import (
	"flag"
	"fmt"
)

// RunFlags are the time-slice flags of `gpuslice run`: --slice, --share,
// --share-max and --priority. Register them on run's flag set, then call Changes.
type RunFlags struct {
	Slice, Share, ShareMax, Priority string
}

// Register adds the flags to fs.
func (f *RunFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Slice, "slice", "", "GPU time slice per scheduling turn, e.g. 20ms or 200us (default: by priority)")
	fs.StringVar(&f.Share, "share", "", "GPU time as a share of the scheduling period, e.g. 30% (instead of --slice)")
	fs.StringVar(&f.ShareMax, "share-max", "", "ceiling on the GPU time, even alone on the GPU, e.g. 40% (default: none, idle time goes to whoever has work)")
	fs.StringVar(&f.Priority, "priority", "", "high (online work: larger slices, may spend banked time first) or low")
}

// Set reports whether any time-slice flag was given.
func (f *RunFlags) Set() bool {
	return f.Slice != "" || f.Share != "" || f.ShareMax != "" || f.Priority != ""
}

// Changes validates the flags and returns them as group setting changes. The
// error names the flag (callers report it as a usage error, exit code 2).
func (f *RunFlags) Changes() ([]Change, error) {
	_, out, err := f.parse()
	return out, err
}

// Settings are the flags' settings on a new group's defaults; errors as Changes.
func (f *RunFlags) Settings() (Settings, error) {
	s, _, err := f.parse()
	return s, err
}

func (f *RunFlags) parse() (Settings, []Change, error) {
	var s Settings
	if f.Slice != "" && f.Share != "" {
		return s, nil, fmt.Errorf("%w: --slice and --share exclude each other", ErrInvalid)
	}
	var out []Change
	for _, c := range []struct{ flag, file, value string }{
		{"--slice", FileSlice, f.Slice}, {"--share", FileShare, f.Share}, {"--share-max", FileShareMax, f.ShareMax},
		{"--priority", FilePriority, f.Priority},
	} {
		if c.value == "" {
			continue
		}
		if err := s.Apply(c.file, c.value); err != nil {
			return Settings{}, nil, fmt.Errorf("%s: %w", c.flag, err)
		}
		out = append(out, Change{File: c.file, Value: c.value})
	}
	return s, out, nil
}
