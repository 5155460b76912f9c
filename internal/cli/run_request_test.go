package cli

import (
	"errors"
	"strings"
	"testing"
)

// The run's memory flags are refused before any GPU is looked at, as usage
// errors naming the flags (exit 2).
func TestRunRequestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "6GiB", "--memory-max", "4GiB"}, "--memory-max 4GiB is below --memory 6GiB"},
		{[]string{"--memory-max", "20GiB"}, "--memory-max needs --memory"},
		{[]string{"--memory", "6GiB", "--spill", "host"}, "--spill needs --memory-max"},
		{[]string{"--memory", "6GiB", "--memory-max", "8GiB", "--spill", "disk"}, "--spill"},
		{[]string{"--memory", "0"}, "--memory must be larger than 0"},
		{[]string{"--memory", "lots"}, "--memory:"},
		{[]string{"--slice", "5ms", "--share", "20%"}, "exclude each other"},
		{[]string{"--share-max", "0.1%"}, "--share-max"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := RunSettings(append(tc.args, "--", "app"))
			var usage *UsageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a usage error saying %q", err, tc.want)
			}
		})
	}
}
