//go:build timeslicee2e

// Package timeslicee2e holds the time-slice daemon's tests that start daemons
// and processes end to end (build tag timeslicee2e; make test-go, test-node,
// test-reliability and the bench targets run them): the test binary
// re-executes itself as clients and daemons, tenant programs
// (test/timeslice/*.c) run on the simulated GPU through bin/libgpuslice.so.
// The daemon's unit tests stay in internal/timeslice.
package timeslicee2e
