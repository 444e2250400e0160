//go:build !linux

package actions

func setSubreaper() {}
