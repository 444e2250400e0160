// Package daemon is the embedding package: its budget is 40.
package daemon

// T is a type.
type T struct{}

// M0 is a method.
func (T) M0() {}

// M1 is a method.
func (T) M1() {}

// M2 is a method.
func (T) M2() {}

// M3 is a method.
func (T) M3() {}

// M4 is a method.
func (T) M4() {}

// M5 is a method.
func (T) M5() {}

// M6 is a method.
func (T) M6() {}

// M7 is a method.
func (T) M7() {}

// M8 is a method.
func (T) M8() {}

// M9 is a method.
func (T) M9() {}

// M10 is a method.
func (T) M10() {}

// M11 is a method.
func (T) M11() {}

// M12 is a method.
func (T) M12() {}

// M13 is a method.
func (T) M13() {}

// M14 is a method.
func (T) M14() {}

// M15 is a method.
func (T) M15() {}

// M16 is a method.
func (T) M16() {}

// M17 is a method.
func (T) M17() {}

// M18 is a method.
func (T) M18() {}

// M19 is a method.
func (T) M19() {}

// M20 is a method.
func (T) M20() {}

// M21 is a method.
func (T) M21() {}

// M22 is a method.
func (T) M22() {}

// M23 is a method.
func (T) M23() {}

// M24 is a method.
func (T) M24() {}

// M25 is a method.
func (T) M25() {}

// M26 is a method.
func (T) M26() {}

// M27 is a method.
func (T) M27() {}

// M28 is a method.
func (T) M28() {}

// M29 is a method.
func (T) M29() {}

// M30 is a method.
func (T) M30() {}

// M31 is a method.
func (T) M31() {}

// M32 is a method.
func (T) M32() {}

// M33 is a method.
func (T) M33() {}

// M34 is a method.
func (T) M34() {}

// M35 is a method.
func (T) M35() {}

// M36 is a method.
func (T) M36() {}

// M37 is a method.
func (T) M37() {}

// M38 is a method.
func (T) M38() {}

// M39 is a method.
func (T) M39() {}
