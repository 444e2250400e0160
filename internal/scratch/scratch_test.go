package scratch_test

import (
	"io"
	"os"
	"testing"

	"github.com/cronswap/cronswap/internal/scratch"
)

// A scratch file has no name in its directory while it is open, is
// written and read back through its descriptor, and Close leaves nothing.
func TestNewFileHasNoNameAndReadsBack(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	f, err := scratch.New("cronswap-test-*")
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("entries of $TMPDIR while the file is open: %v (%v), want none", entries, err)
	}
	if _, err := f.WriteString("kept in the open file"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil || string(got) != "kept in the open file" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if err := scratch.Close(f); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("entries of $TMPDIR after Close: %v", entries)
	}
}

// New says where it failed: a $TMPDIR that does not exist.
func TestNewFailsWithThePattern(t *testing.T) {
	t.Setenv("TMPDIR", "/nonexistent-cronswap-scratch-dir")
	if _, err := scratch.New("cronswap-test-*"); err == nil {
		t.Fatal("no error for a $TMPDIR that does not exist")
	}
}
