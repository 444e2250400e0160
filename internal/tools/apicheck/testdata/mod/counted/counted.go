// Package counted holds one of each kind of declaration apicheck meets.
package counted

import "io"

// Limits, documented as a group.
const (
	Low  = 1
	High = 2
	low  = 0
)

// Reader is a variable.
var Reader io.Reader

// Value is a struct: its fields do not count.
type Value struct {
	// Field is documented but not counted.
	Field int
	Other string
}

// Get is a method of an exported type: it counts.
func (v Value) Get() int { return v.Field + low }

// Set counts too (pointer receiver).
func (v *Value) Set(n int) { v.Field = n }

func (v Value) hidden() {}

// Box is generic; its methods count.
type Box[T any] struct{ v T }

// Put is a method of a generic type.
func (b *Box[T]) Put(v T) { b.v = v }

// Doer is an interface: its methods do not count.
type Doer interface {
	// Do is not counted.
	Do() error
	Undo() error
}

type private struct{}

// Exported is a method of an unexported type: not counted.
func (private) Exported() {}

// New is a function.
func New() Value { return Value{} }
