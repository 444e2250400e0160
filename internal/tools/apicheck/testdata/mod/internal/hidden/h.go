package hidden

func Undocumented() {}
