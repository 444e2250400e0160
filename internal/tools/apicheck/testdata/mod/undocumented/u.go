package undocumented

const Bare = 1

// Documented is fine.
func Documented() {}

func Naked() {}

// T is documented.
type T struct{}

func (T) Method() {}

var (
	A, B int
)
