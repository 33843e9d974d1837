//go:build linux

package nenyax_test

import "syscall"

func gettid() int { return syscall.Gettid() }
