//go:build !linux

package jobs

func setSubreaper() {}
