package testmongo

import (
	"fmt"
	"strings"
	"testing"
)

func TestTailBufferSince(t *testing.T) {
	b := newTailBuffer(16)
	fmt.Fprint(b, "before;")
	m := b.mark()
	if got := b.since(m); got != "" {
		t.Errorf("since a fresh mark: %q, want nothing", got)
	}
	fmt.Fprint(b, "after;")
	if got := b.since(m); got != "after;" {
		t.Errorf("since the mark: %q, want %q", got, "after;")
	}
	// More than the buffer holds: what is left of it.
	fmt.Fprint(b, "0123456789abcdef")
	if got := b.since(m); got != "0123456789abcdef" {
		t.Errorf("since the mark, past the buffer's size: %q, want its last 16 bytes", got)
	}
}

// failingTB is a testing.TB whose cleanups run when asked and whose failure
// is set by the test.
type failingTB struct {
	testing.TB
	failed   bool
	cleanups []func()
	logs     []string
}

func (f *failingTB) Helper()           {}
func (f *failingTB) Name() string      { return "TestSomething" }
func (f *failingTB) Failed() bool      { return f.failed }
func (f *failingTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failingTB) Logf(format string, a ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, a...))
}

func (f *failingTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestLogOnFailure(t *testing.T) {
	for _, failed := range []bool{false, true} {
		s := &Server{stderr: newTailBuffer(1 << 10)}
		fmt.Fprintln(s.stderr, "WARN from an earlier test")
		tb := &failingTB{TB: t, failed: failed}
		s.logOnFailure(tb)
		fmt.Fprintln(s.stderr, "WARN ConnectionErrors - closing connection")
		tb.end()
		logged := strings.Join(tb.logs, "\n")
		if !failed {
			if logged != "" {
				t.Errorf("a passing test logged %q, want nothing", logged)
			}
			continue
		}
		if !strings.Contains(logged, "closing connection") || strings.Contains(logged, "earlier test") {
			t.Errorf("a failed test logged %q, want only what the server wrote while it ran", logged)
		}
	}
}
