package schedfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// jsonArray reads the elements of a JSON array one at a time, knowing the
// line each starts on.
type jsonArray struct {
	rec     *recorder
	dec     *json.Decoder
	started bool
	// line is the line of offset base.
	line int
}

func newJSONArray(r io.Reader) *jsonArray {
	rec := &recorder{r: r}
	return &jsonArray{rec: rec, dec: json.NewDecoder(rec), line: 1}
}

// next returns the next element and the line it starts on; io.EOF after
// the closing bracket.
func (a *jsonArray) next() (json.RawMessage, int, error) {
	if !a.started {
		a.started = true
		if _, err := a.dec.Token(); err != nil {
			return a.fail(err)
		}
	}
	if !a.dec.More() {
		if _, err := a.dec.Token(); err != nil { // the closing bracket
			return a.fail(err)
		}
		if _, err := a.dec.Token(); err != io.EOF {
			return nil, a.lineAt(a.dec.InputOffset()), errors.New("text after the closing ] of the array")
		}
		return nil, 0, io.EOF
	}
	var raw json.RawMessage
	if err := a.dec.Decode(&raw); err != nil {
		return a.fail(err)
	}
	end := a.dec.InputOffset()
	start := a.lineAt(end - int64(len(raw)))
	a.forget(end)
	return raw, start, nil
}

// fail returns err with the line it concerns: a syntax error's own.
func (a *jsonArray) fail(err error) (json.RawMessage, int, error) {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return nil, a.lineAt(se.Offset), fmt.Errorf("not JSON: %v", err)
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, a.lineAt(a.dec.InputOffset()), errors.New("the JSON array is not closed")
	}
	return nil, a.lineAt(a.dec.InputOffset()), err
}

// lineAt is the line of the byte at offset (at or after base).
func (a *jsonArray) lineAt(offset int64) int {
	i := min(max(offset-a.rec.base, 0), int64(len(a.rec.data)))
	return a.line + bytes.Count(a.rec.data[:i], []byte{'\n'})
}

// forget drops what was read before offset.
func (a *jsonArray) forget(offset int64) {
	i := min(max(offset-a.rec.base, 0), int64(len(a.rec.data)))
	a.line += bytes.Count(a.rec.data[:i], []byte{'\n'})
	a.rec.data = append(a.rec.data[:0], a.rec.data[i:]...)
	a.rec.base += i
}

// recorder keeps what was read from r since offset base, so that offsets
// the JSON decoder reports can be turned into lines.
type recorder struct {
	r    io.Reader
	data []byte
	base int64
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.data = append(r.data, p[:n]...)
	return n, err
}
