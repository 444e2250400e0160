package statefile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"iter"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/cronswap/cronswap/changestream"
)

var opts = Options{WatcherID: "w1", Source: "cronswap.schedules"}

func mustRaw(d bson.D) bson.Raw {
	b, err := bson.Marshal(d)
	if err != nil {
		panic(err)
	}
	return b
}

// state builds a state of n schedules whose token and expressions carry tag.
func state(_ testing.TB, tag string, n int) changestream.State {
	var docs []bson.Raw
	for i := range n {
		docs = append(docs, mustRaw(bson.D{{Key: "_id", Value: fmt.Sprintf("job%05d", i)},
			{Key: "cron_expr", Value: fmt.Sprintf("%d 9 * * *", i%60)}, {Key: "tag", Value: tag},
			{Key: "updated_at", Value: time.Unix(1_700_000_000, 0)}}))
	}
	return changestream.State{Token: mustRaw(bson.D{{Key: "_data", Value: "tok-" + tag}}), Docs: seq(docs)}
}

// seq yields docs as a full read does: each in a buffer the next one
// overwrites.
func seq(docs []bson.Raw) iter.Seq2[bson.Raw, error] {
	return func(yield func(bson.Raw, error) bool) {
		var buf []byte
		for _, d := range docs {
			buf = append(buf[:0], d...)
			if !yield(bson.Raw(buf), nil) {
				return
			}
			clear(buf)
		}
	}
}

// collect copies every document of st; it fails the test on a read error.
func collect(t testing.TB, st changestream.State) []bson.Raw {
	t.Helper()
	var out []bson.Raw
	for d, err := range st.Docs {
		if err != nil {
			t.Fatalf("reading the documents: %v", err)
		}
		out = append(out, append(bson.Raw(nil), d...))
	}
	return out
}

func equalState(t testing.TB, a, b changestream.State) bool {
	t.Helper()
	if !bytes.Equal(a.Token, b.Token) {
		return false
	}
	da, db := collect(t, a), collect(t, b)
	if len(da) != len(db) {
		return false
	}
	for i := range da {
		if !bytes.Equal(da[i], db[i]) {
			return false
		}
	}
	return true
}

func TestSaveLoadRoundTrip(t *testing.T) {
	ctx := context.Background()
	f := New(filepath.Join(t.TempDir(), "state"), opts)
	for _, n := range []int{0, 1, 1000} {
		want := state(t, strconv.Itoa(n), n)
		if err := f.Save(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := f.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Documents != n {
			t.Errorf("%d documents: the loaded state says %d before they are read", n, got.Documents)
		}
		if !equalState(t, got, want) {
			t.Fatalf("%d documents: loaded state differs from the saved one", n)
		}
	}
	if _, err := os.Stat(f.Path() + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left behind after a good save: %v", err)
	}
	b, err := os.ReadFile(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	_, info, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if info.WatcherID != "w1" || info.Source != "cronswap.schedules" || time.Since(info.SavedAt) > time.Hour {
		t.Errorf("info = %+v", info)
	}
}

func TestLoadMissing(t *testing.T) {
	f := New(filepath.Join(t.TempDir(), "state"), opts)
	_, err := f.Load(context.Background())
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestLoadRefusesOtherWatcherOrCollection(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state")
	if err := New(path, opts).Save(ctx, state(t, "a", 3)); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{WatcherID: "w2", Source: opts.Source}, {WatcherID: opts.WatcherID, Source: "other.schedules"}} {
		if _, err := New(path, o).Load(ctx); !errors.Is(err, ErrMismatch) {
			t.Errorf("Load as %+v: %v, want ErrMismatch", o, err)
		}
	}
}

// Every truncation and every single-byte change of a good file is refused.
func TestCorruptFilesAreRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	good := New(filepath.Join(dir, "good"), opts)
	if err := good.Save(ctx, state(t, "a", 5)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(good.Path())
	if err != nil {
		t.Fatal(err)
	}
	bad := New(filepath.Join(dir, "bad"), opts)
	check := func(what string, content []byte) {
		t.Helper()
		if err := os.WriteFile(bad.Path(), content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Load(ctx); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Load = %v; want ErrCorrupt", what, err)
		}
	}
	for n := range len(b) {
		check(fmt.Sprintf("truncated to %d of %d bytes", n, len(b)), b[:n])
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		check(fmt.Sprintf("byte %d altered", i), c)
	}
	check("garbage appended", append(bytes.Clone(b), 1, 2, 3))
	// An intact file of another format version is refused too.
	c := bytes.Clone(b[:len(b)-4])
	c[8] = 1
	check("version 1", binaryAppendCRC(c))
	// An intact checksum over a count no file of this size could hold
	// (written by something else than Save) is refused at the load, before
	// anything is sized by it.
	c = bytes.Clone(b[:len(b)-4])
	binary.LittleEndian.PutUint64(c[len(c)-8:], 1<<40)
	check("a count of 2^40 documents", binaryAppendCRC(c))
}

func binaryAppendCRC(body []byte) []byte {
	sum := crc32.Checksum(body, castagnoli)
	return append(body, byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24))
}

// A crash (here: an injected failure with no clean-up) at any step of Save
// leaves the old file or the new one, complete, never anything else.
func TestCrashAtEachStepLeavesOldOrNew(t *testing.T) {
	ctx := context.Background()
	steps := []struct {
		step    Step
		wantNew bool
	}{
		{StepCreate, false}, {StepWrite, false}, {StepWritten, false}, {StepSynced, false},
		{StepRenamed, true}, {StepDirSynced, true},
	}
	for _, tc := range steps {
		t.Run(string(tc.step), func(t *testing.T) {
			f := New(filepath.Join(t.TempDir(), "state"), opts)
			oldSt, newSt := state(t, "old", 200), state(t, "new", 300)
			if err := f.Save(ctx, oldSt); err != nil {
				t.Fatal(err)
			}
			crash := errors.New("crash")
			f.fail = func(s Step) error {
				if s == tc.step {
					return crash
				}
				return nil
			}
			if err := f.Save(ctx, newSt); !errors.Is(err, crash) {
				t.Fatalf("Save with a crash at %s: %v", tc.step, err)
			}
			f.fail = nil
			got, err := f.Load(ctx)
			if err != nil {
				t.Fatalf("after a crash at %s the file does not load: %v", tc.step, err)
			}
			want, name := oldSt, "old"
			if tc.wantNew {
				want, name = newSt, "new"
			}
			if !equalState(t, got, want) {
				t.Fatalf("after a crash at %s the file is not the %s state", tc.step, name)
			}
			// The next save works despite the leftover temporary file.
			third := state(t, "third", 10)
			if err := f.Save(ctx, third); err != nil {
				t.Fatal(err)
			}
			if got, err := f.Load(ctx); err != nil || !equalState(t, got, third) {
				t.Fatalf("save after the crash: %v", err)
			}
		})
	}
}

// TestKilledWriterLeavesOldOrNew kills a process that saves two states in
// turn (SIGKILL at random moments) and checks the file is always one of
// them, complete.
func TestKilledWriterLeavesOldOrNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	a, b := state(t, "a", 2000), state(t, "b", 3000)
	if err := New(path, opts).Save(ctx, a); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the helper is saving, then kill it at a random moment.
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "saving\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("helper did not start: %q, %v", line, err)
		}
		time.Sleep(time.Duration(rand.N(30_000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		got, err := New(path, opts).Load(ctx)
		if err != nil {
			t.Fatalf("kill %d: the file does not load: %v", i, err)
		}
		if !equalState(t, got, a) && !equalState(t, got, b) {
			t.Fatalf("kill %d: the file is neither state", i)
		}
	}
}

const helperEnv = "STATEFILE_TEST_WRITER"

// TestMain doubles as the writer process TestKilledWriterLeavesOldOrNew
// kills: with helperEnv set it saves two states in turn until killed.
func TestMain(m *testing.M) {
	path := os.Getenv(helperEnv)
	if path == "" {
		os.Exit(m.Run())
	}
	f := New(path, opts)
	a, b := state(nil, "a", 2000), state(nil, "b", 3000)
	fmt.Println("saving")
	for i := 0; ; i++ {
		st := a
		if i%2 == 1 {
			st = b
		}
		if err := f.Save(context.Background(), st); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Saving and loading a state of 20 MB holds about one document at a
// time: the live heap, measured halfway through each, grows by far less
// than the documents (a save or a load that held them all fails).
func TestSaveAndLoadHoldOneDocumentAtATime(t *testing.T) {
	const n, size = 20_000, 1000 // 20 MB of documents
	const bound = 4 << 20
	ctx := context.Background()
	pad := strings.Repeat("x", size-60)
	gen := func(yield func(bson.Raw, error) bool) {
		for i := range n {
			b, err := bson.Marshal(bson.D{{Key: "_id", Value: fmt.Sprintf("job%06d", i)},
				{Key: "cron_expr", Value: "0 9 * * *"}, {Key: "pad", Value: pad}})
			if err != nil {
				panic(err)
			}
			if !yield(bson.Raw(b), nil) {
				return
			}
		}
	}
	var base, mid uint64
	measured := func(docs iter.Seq2[bson.Raw, error]) iter.Seq2[bson.Raw, error] {
		return func(yield func(bson.Raw, error) bool) {
			i := 0
			for d, err := range docs {
				if i++; i == n/2 {
					mid = heapInUse()
				}
				if !yield(d, err) {
					return
				}
			}
		}
	}
	f := New(filepath.Join(t.TempDir(), "state"), opts)
	base = heapInUse()
	if err := f.Save(ctx, changestream.State{Token: mustRaw(bson.D{{Key: "_data", Value: "t"}}), Docs: measured(gen)}); err != nil {
		t.Fatal(err)
	}
	if mid > base && mid-base > bound {
		t.Errorf("saving: the heap grew by %d bytes halfway through %d bytes of documents", mid-base, n*size)
	}
	base = heapInUse()
	st, err := f.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for d, err := range measured(st.Docs) {
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("job%06d", count); d.Lookup("_id").StringValue() != want {
			t.Fatalf("document %d is %s", count, d.Lookup("_id"))
		}
		count++
	}
	if count != n {
		t.Fatalf("loaded %d documents, want %d", count, n)
	}
	if mid > base && mid-base > bound {
		t.Errorf("loading: the heap grew by %d bytes halfway through %d bytes of documents", mid-base, n*size)
	}
}
