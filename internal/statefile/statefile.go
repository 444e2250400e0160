// Package statefile persists the watcher's applied schedules together with
// the resume token they correspond to, so that a restarted daemon can arm
// every job from a local file instead of reading the whole collection (a
// warm restart), then resume the change stream from that token.
//
// # Format (version 2)
//
//	magic    8 bytes  "CRSWSTAT"
//	version  uint32   little endian, 2
//	header   BSON     {watcher_id, source, saved_at, token}
//	docs     BSON documents, back to back (each carries its length)
//	end      uint32   0 (no document is shorter than 5 bytes)
//	count    uint64   little endian, the number of documents
//	crc      uint32   CRC-32C (Castagnoli) of everything before it
//
// The documents are the schedules documents exactly as the daemon applied
// them, so arming from the file goes through the same decoding and
// validation as a full reload. The file is written and read one document
// at a time (the count follows them), so neither a save nor a load holds
// the collection: Load checks the whole file's checksum in one pass
// before it hands out anything, then reads the documents in a second pass
// as they are asked for, checking the checksum again as it goes. Version
// 1 (the count in the header, written from a slice of every document) is
// refused as ErrCorrupt: the daemon then does one full reload and writes
// version 2.
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
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
	"os"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
)

// Version is the format version written by Save.
const Version = 2

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
	StepWrite     Step = "write"      // the header and the first document written
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
}

// prefixLen is the magic and the version; trailerLen the end mark, the
// count and the checksum.
const (
	prefixLen  = 12
	trailerLen = 4 + 8 + 4
	// countFromEnd is where the count starts, counted from the end of the
	// file: before the checksum's 4 bytes.
	countFromEnd = 8 + 4
)

// Save writes st atomically (see the package doc), reading st.Docs once.
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
	if err := encode(bw, f.opts, st, func(i int64) error {
		if i != 1 {
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

// encode writes everything but the trailing checksum; each(n) is called
// after the n-th document.
func encode(w io.Writer, opts Options, st changestream.State, each func(int64) error) error {
	hdr, err := bson.Marshal(header{WatcherID: opts.WatcherID, Source: opts.Source,
		SavedAt: time.Now().UTC(), Token: st.Token})
	if err != nil {
		return err
	}
	var pre [prefixLen]byte
	copy(pre[:], magic)
	binary.LittleEndian.PutUint32(pre[8:], Version)
	if _, err := w.Write(pre[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	var n int64
	if st.Docs != nil {
		for d, err := range st.Docs {
			if err != nil {
				return err
			}
			if len(d) < 5 {
				return fmt.Errorf("document %d is %d bytes, not a document", n, len(d))
			}
			if _, err := w.Write(d); err != nil {
				return err
			}
			n++
			if err := each(n); err != nil {
				return err
			}
		}
	}
	var end [4 + 8]byte
	binary.LittleEndian.PutUint64(end[4:], uint64(n))
	_, err = w.Write(end[:])
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Load checks the file and returns its token and its documents, read from
// the file as State.Docs is ranged over (see the package doc). A missing
// file is an error wrapping fs.ErrNotExist, a damaged one wraps ErrCorrupt,
// one written for another watcher or collection wraps ErrMismatch; a file
// that changes between the check and the read yields an error wrapping
// ErrCorrupt from Docs.
func (f *File) Load(_ context.Context) (changestream.State, error) {
	in, err := os.Open(f.path)
	if err != nil {
		return changestream.State{}, fmt.Errorf("read state file: %w", err)
	}
	defer in.Close()
	hdr, count, err := check(in)
	if err != nil {
		return changestream.State{}, fmt.Errorf("state file %s: %w", f.path, err)
	}
	if hdr.WatcherID != f.opts.WatcherID || hdr.Source != f.opts.Source {
		return changestream.State{}, fmt.Errorf("state file %s is for watcher %q on %s, not %q on %s: %w",
			f.path, hdr.WatcherID, hdr.Source, f.opts.WatcherID, f.opts.Source, ErrMismatch)
	}
	return changestream.State{Token: hdr.Token, Docs: f.docs(), Documents: count}, nil
}

// check reads a whole state file once: its prefix and header, then every
// byte into the checksum, which must match the trailer's. It returns the
// header and the trailer's count of documents (which the documents' read
// checks again).
func check(in *os.File) (header, int, error) {
	fi, err := in.Stat()
	if err != nil {
		return header{}, 0, err
	}
	size := fi.Size()
	if size < prefixLen+5+trailerLen {
		return header{}, 0, fmt.Errorf("%d bytes, too short: %w", size, ErrCorrupt)
	}
	crc := crc32.New(castagnoli)
	r := bufio.NewReaderSize(io.TeeReader(io.LimitReader(in, size-4), crc), 1<<20)
	hdr, err := readHeader(r)
	if err != nil {
		return header{}, 0, err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return header{}, 0, err
	}
	if err := checkSum(in, crc.Sum32()); err != nil {
		return header{}, 0, err
	}
	var c [8]byte
	if _, err := in.ReadAt(c[:], size-countFromEnd); err != nil {
		return header{}, 0, fmt.Errorf("reading the count: %v: %w", err, ErrCorrupt)
	}
	// No document is shorter than 5 bytes: a larger count is refused when
	// the documents are read, and must not size anything before that.
	count := binary.LittleEndian.Uint64(c[:])
	if count > uint64(size/5) {
		return header{}, 0, fmt.Errorf("count %d in %d bytes: %w", count, size, ErrCorrupt)
	}
	return hdr, int(count), nil
}

// checkSum reads the trailing checksum from in and compares it with got.
func checkSum(in io.Reader, got uint32) error {
	var b [4]byte
	if _, err := io.ReadFull(in, b[:]); err != nil {
		return fmt.Errorf("reading the checksum: %v: %w", err, ErrCorrupt)
	}
	if want := binary.LittleEndian.Uint32(b[:]); got != want {
		return fmt.Errorf("checksum %08x, want %08x (torn or altered): %w", got, want, ErrCorrupt)
	}
	return nil
}

// readHeader reads the prefix (magic, version) and the header.
func readHeader(r *bufio.Reader) (header, error) {
	var pre [prefixLen]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return header{}, fmt.Errorf("prefix: %v: %w", err, ErrCorrupt)
	}
	if string(pre[:8]) != magic {
		return header{}, fmt.Errorf("not a cronswap state file: %w", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(pre[8:]); v != Version {
		return header{}, fmt.Errorf("format version %d, want %d: %w", v, Version, ErrCorrupt)
	}
	raw, err := readDoc(r, nil)
	if err != nil {
		return header{}, fmt.Errorf("header: %w", err)
	}
	var hdr header
	if err := bson.Unmarshal(raw, &hdr); err != nil {
		return header{}, fmt.Errorf("header: %v: %w", err, ErrCorrupt)
	}
	return hdr, nil
}

// readDoc reads one length-prefixed BSON document into buf (reused) and
// returns it; nil, nil at the end mark (a zero length). The checksum
// vouches for the bytes; this guards against a file written wrong.
func readDoc(r *bufio.Reader, buf []byte) (bson.Raw, error) {
	var l [4]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, fmt.Errorf("document length: %v: %w", err, ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(l[:]))
	if n == 0 {
		return nil, nil
	}
	if n < 5 || n > maxDocBytes {
		return nil, fmt.Errorf("bad document length %d: %w", n, ErrCorrupt)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	copy(buf, l[:])
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, fmt.Errorf("document of %d bytes: %v: %w", n, err, ErrCorrupt)
	}
	if buf[n-1] != 0 {
		return nil, fmt.Errorf("document of %d bytes not terminated: %w", n, ErrCorrupt)
	}
	return bson.Raw(buf), nil
}

// maxDocBytes bounds one document of a state file: a server's 16 MiB.
const maxDocBytes = 16 << 20

// docs reads the file's documents one at a time, into one buffer reused
// from document to document, and checks its count and checksum at the
// end: a file that changed since Load checked it yields an error.
func (f *File) docs() iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		fail := func(err error) { yield(nil, fmt.Errorf("state file %s: %w", f.path, err)) }
		in, err := os.Open(f.path)
		if err != nil {
			fail(err)
			return
		}
		defer in.Close()
		fi, err := in.Stat()
		if err != nil {
			fail(err)
			return
		}
		if fi.Size() < prefixLen+5+trailerLen {
			fail(fmt.Errorf("%d bytes, too short: %w", fi.Size(), ErrCorrupt))
			return
		}
		crc := crc32.New(castagnoli)
		r := bufio.NewReaderSize(io.TeeReader(io.LimitReader(in, fi.Size()-4), crc), 1<<20)
		if _, err := readHeader(r); err != nil {
			fail(err)
			return
		}
		var buf []byte
		var n uint64
		for {
			d, err := readDoc(r, buf)
			if err != nil {
				fail(fmt.Errorf("document %d: %w", n, err))
				return
			}
			if d == nil {
				break
			}
			buf = d
			n++
			if !yield(d, nil) {
				return
			}
		}
		var c [8]byte
		if _, err := io.ReadFull(r, c[:]); err != nil {
			fail(fmt.Errorf("count: %v: %w", err, ErrCorrupt))
			return
		}
		if want := binary.LittleEndian.Uint64(c[:]); want != n {
			fail(fmt.Errorf("%d documents, the file says %d: %w", n, want, ErrCorrupt))
			return
		}
		if k, _ := io.Copy(io.Discard, r); k != 0 {
			fail(fmt.Errorf("%d bytes after the count: %w", k, ErrCorrupt))
			return
		}
		if err := checkSum(in, crc.Sum32()); err != nil {
			fail(err)
		}
	}
}

// Info is what a state file says about itself.
type Info struct {
	WatcherID string
	Source    string
	SavedAt   time.Time
	// Documents is the number of documents.
	Documents int
}

// Decode parses a whole state file held in b (for tools that inspect one;
// the daemon reads files with Load). The documents of the result are
// slices of b.
func Decode(b []byte) (changestream.State, Info, error) {
	if len(b) < prefixLen+5+trailerLen {
		return changestream.State{}, Info{}, fmt.Errorf("%d bytes, too short: %w", len(b), ErrCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return changestream.State{}, Info{}, fmt.Errorf("checksum %08x, want %08x (torn or altered): %w", got, sum, ErrCorrupt)
	}
	r := bufio.NewReader(bytes.NewReader(body))
	hdr, err := readHeader(r)
	if err != nil {
		return changestream.State{}, Info{}, err
	}
	rest, _ := io.ReadAll(r)
	var docs []bson.Raw
	for {
		if len(rest) < 4 {
			return changestream.State{}, Info{}, fmt.Errorf("no end mark: %w", ErrCorrupt)
		}
		n := int(binary.LittleEndian.Uint32(rest))
		if n == 0 {
			rest = rest[4:]
			break
		}
		if n < 5 || n > len(rest) || rest[n-1] != 0 {
			return changestream.State{}, Info{}, fmt.Errorf("document %d: bad length %d: %w", len(docs), n, ErrCorrupt)
		}
		docs = append(docs, bson.Raw(rest[:n:n]))
		rest = rest[n:]
	}
	if len(rest) != 8 || binary.LittleEndian.Uint64(rest) != uint64(len(docs)) {
		return changestream.State{}, Info{}, fmt.Errorf("count does not match %d documents: %w", len(docs), ErrCorrupt)
	}
	st := changestream.State{Token: hdr.Token, Docs: func(yield func(bson.Raw, error) bool) {
		for _, d := range docs {
			if !yield(d, nil) {
				return
			}
		}
	}}
	return st, Info{WatcherID: hdr.WatcherID, Source: hdr.Source, SavedAt: hdr.SavedAt, Documents: len(docs)}, nil
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
