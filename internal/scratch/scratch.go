// Package scratch creates the temporary files cronswap writes and reads
// back: a job's output streams, a schedules file given on stdin. On Unix
// a file's name is removed as soon as it is created: the open file
// disappears with the last descriptor, however the process ends (SIGKILL,
// out of memory), so nothing of it is left on disk for anyone to read.
package scratch

import (
	"fmt"
	"os"
)

// New creates a temporary file in the default directory (os.TempDir:
// $TMPDIR, else /tmp) with a name made from pattern as os.CreateTemp does,
// and removes the name where an open file's name can be removed (Unix).
// Give the file to Close when done with it.
func New(pattern string) (*os.File, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return nil, fmt.Errorf("temporary file %s: %w", pattern, err)
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// Close closes f, a file from New, and removes its name if New could not.
func Close(f *os.File) error {
	err := f.Close()
	_ = os.Remove(f.Name())
	return err
}
