// Package upgrade holds the rolling-upgrade tests (build tag upgrade, `make
// test-upgrade`): a library and a daemon of different releases on one running
// group. See upgrade_test.go.
package upgrade
