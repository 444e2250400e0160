package docless

// Fine is documented; the package is not.
func Fine() {}
