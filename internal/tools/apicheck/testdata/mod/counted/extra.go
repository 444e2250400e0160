package counted

// Kind is declared in a second file.
type Kind string // (also line-documented)
