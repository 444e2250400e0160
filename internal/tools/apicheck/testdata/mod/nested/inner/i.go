package inner

func Undocumented() {}
