// Package statefile persists the watcher's applied schedules together with
// the resume token they correspond to, so that a restarted daemon can arm
// every job from a local file instead of reading the whole collection (a
// warm restart), then resume the change stream from that token.
//
// # Format (version 1)
//
//	magic    8 bytes  "CRSWSTAT"
//	version  uint32   little endian, 1
//	header   BSON     {watcher_id, source, saved_at, token, count}
//	docs     count BSON documents, back to back (each carries its length)
//	crc      uint32   CRC-32C (Castagnoli) of everything before it
//
// The documents are the schedules documents exactly as the server sent
// them, so arming from the file goes through the same decoding and
// validation as a full reload, and reading the file is slicing one buffer.
//
// # Atomicity
//
// Save writes a temporary file next to the target (same directory, so the
// same file system), fsyncs it, renames it over the target and fsyncs the
// directory. A crash at any point leaves either the previous file or the
// new one, never a mix; a file torn or altered in any other way fails the
// checksum and Load refuses it with ErrCorrupt.
package statefile

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
)

// Version is the format version written by Save.
const Version = 1

const magic = "CRSWSTAT"

// ErrCorrupt is wrapped by Load for a file that is not a complete, intact
// state file (torn, truncated, altered, or of an unknown version).
var ErrCorrupt = errors.New("state file is corrupt")

// ErrMismatch is wrapped by Load for an intact file written for another
// watcher id or another database/collection.
var ErrMismatch = errors.New("state file belongs to another watcher or collection")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Step names a point of Save, for failure injection in tests.
type Step string

// Steps of Save, in order.
const (
	StepCreate    Step = "create"     // temporary file created, nothing written
	StepWrite     Step = "write"      // half of the content written
	StepWritten   Step = "written"    // all written, not yet synced
	StepSynced    Step = "synced"     // temporary file synced and closed
	StepRenamed   Step = "renamed"    // renamed over the target, directory not yet synced
	StepDirSynced Step = "dir_synced" // done
)

// Options identifies what a state file is for; Load refuses a file written
// for something else.
type Options struct {
	// WatcherID is the resume token's watcher id (the instance id).
	WatcherID string
	// Source names the watched collection, e.g. "cronswap.schedules".
	Source string
}

// File is a state file at one path. It implements changestream.StateStore.
// Saves must not run concurrently (the watcher serialises them).
type File struct {
	path string
	opts Options
	// fail, when set, is called at each step of Save; an error stops Save
	// there as a crash would (no clean-up).
	fail func(Step) error
}

var _ changestream.StateStore = (*File)(nil)

// New returns the state file at path.
func New(path string, opts Options) *File {
	return &File{path: path, opts: opts}
}

// Path returns the file's path.
func (f *File) Path() string { return f.path }

type header struct {
	WatcherID string    `bson:"watcher_id"`
	Source    string    `bson:"source"`
	SavedAt   time.Time `bson:"saved_at"`
	Token     bson.Raw  `bson:"token"`
	Count     int64     `bson:"count"`
}

// Save writes st atomically (see the package doc).
func (f *File) Save(_ context.Context, st changestream.State) error {
	if err := f.save(st); err != nil {
		return fmt.Errorf("save state file %s: %w", f.path, err)
	}
	return nil
}

func (f *File) step(s Step) error {
	if f.fail == nil {
		return nil
	}
	return f.fail(s)
}

func (f *File) save(st changestream.State) error {
	tmp := f.path + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			_ = out.Close()
		}
	}()
	if err := f.step(StepCreate); err != nil {
		return err
	}
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(out, crc), 1<<20)
	half := len(st.Docs) / 2
	if err := encode(bw, f.opts, st, func(i int) error {
		if i != half {
			return nil
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return f.step(StepWrite)
	}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := binary.Write(out, binary.LittleEndian, crc.Sum32()); err != nil {
		return err
	}
	if err := f.step(StepWritten); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	closed = true
	if err := out.Close(); err != nil {
		return err
	}
	if err := f.step(StepSynced); err != nil {
		return err
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return err
	}
	if err := f.step(StepRenamed); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(f.path)); err != nil {
		return err
	}
	return f.step(StepDirSynced)
}

// encode writes everything but the trailing checksum; each(i) is called
// before document i.
func encode(w io.Writer, opts Options, st changestream.State, each func(int) error) error {
	hdr, err := bson.Marshal(header{WatcherID: opts.WatcherID, Source: opts.Source,
		SavedAt: time.Now().UTC(), Token: st.Token, Count: int64(len(st.Docs))})
	if err != nil {
		return err
	}
	var pre [12]byte
	copy(pre[:], magic)
	binary.LittleEndian.PutUint32(pre[8:], Version)
	if _, err := w.Write(pre[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for i, d := range st.Docs {
		if err := each(i); err != nil {
			return err
		}
		if _, err := w.Write(d); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Load reads the file. A missing file is an error wrapping fs.ErrNotExist,
// a damaged one wraps ErrCorrupt, one written for another watcher or
// collection wraps ErrMismatch.
func (f *File) Load(_ context.Context) (changestream.State, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return changestream.State{}, fmt.Errorf("read state file: %w", err)
	}
	st, hdr, err := Decode(b)
	if err != nil {
		return changestream.State{}, fmt.Errorf("state file %s: %w", f.path, err)
	}
	if hdr.WatcherID != f.opts.WatcherID || hdr.Source != f.opts.Source {
		return changestream.State{}, fmt.Errorf("state file %s is for watcher %q on %s, not %q on %s: %w",
			f.path, hdr.WatcherID, hdr.Source, f.opts.WatcherID, f.opts.Source, ErrMismatch)
	}
	return st, nil
}

// Info is what a state file says about itself.
type Info struct {
	WatcherID string
	Source    string
	SavedAt   time.Time
}

// Decode parses a whole state file. The documents in the result are slices
// of b.
func Decode(b []byte) (changestream.State, Info, error) {
	var st changestream.State
	if len(b) < 12+5+4 {
		return st, Info{}, fmt.Errorf("%d bytes, too short: %w", len(b), ErrCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return st, Info{}, fmt.Errorf("checksum %08x, want %08x (torn or altered): %w", got, sum, ErrCorrupt)
	}
	if string(body[:8]) != magic {
		return st, Info{}, fmt.Errorf("not a cronswap state file: %w", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(body[8:12]); v != Version {
		return st, Info{}, fmt.Errorf("format version %d, want %d: %w", v, Version, ErrCorrupt)
	}
	rest := body[12:]
	hdrRaw, rest, err := next(rest)
	if err != nil {
		return st, Info{}, fmt.Errorf("header: %w", err)
	}
	var hdr header
	if err := bson.Unmarshal(hdrRaw, &hdr); err != nil {
		return st, Info{}, fmt.Errorf("header: %v: %w", err, ErrCorrupt)
	}
	if hdr.Count < 0 || hdr.Count > int64(len(rest)/5) {
		return st, Info{}, fmt.Errorf("header says %d documents in %d bytes: %w", hdr.Count, len(rest), ErrCorrupt)
	}
	st.Token = hdr.Token
	st.Docs = make([]bson.Raw, 0, hdr.Count)
	for i := int64(0); i < hdr.Count; i++ {
		var d bson.Raw
		if d, rest, err = next(rest); err != nil {
			return changestream.State{}, Info{}, fmt.Errorf("document %d: %w", i, err)
		}
		st.Docs = append(st.Docs, d)
	}
	if len(rest) != 0 {
		return changestream.State{}, Info{}, fmt.Errorf("%d bytes after the last document: %w", len(rest), ErrCorrupt)
	}
	return st, Info{WatcherID: hdr.WatcherID, Source: hdr.Source, SavedAt: hdr.SavedAt}, nil
}

// next splits one length-prefixed BSON document off b. The checksum already
// vouches for the bytes; this guards against a file written wrong.
func next(b []byte) (bson.Raw, []byte, error) {
	if len(b) < 5 {
		return nil, nil, fmt.Errorf("%d bytes left, no room for a document: %w", len(b), ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 5 || n > len(b) || b[n-1] != 0 {
		return nil, nil, fmt.Errorf("bad document length %d: %w", n, ErrCorrupt)
	}
	return bson.Raw(b[:n:n]), b[n:], nil
}

// Remove deletes the file (and a leftover temporary file); a missing file
// is not an error.
func (f *File) Remove() error {
	for _, p := range []string{f.path, f.path + ".tmp"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove state file: %w", err)
		}
	}
	return nil
}
