package e2e

func Undocumented() {}
