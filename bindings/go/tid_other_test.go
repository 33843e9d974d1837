//go:build !linux

package nenyax_test

// gettid is a constant where there is no portable thread id, which turns the same-thread
// assertions into no-ops.
func gettid() int { return 0 }
