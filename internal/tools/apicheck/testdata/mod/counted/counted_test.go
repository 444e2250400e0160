package counted

func TestHelperNotCounted() {}

type Undocumented struct{}
