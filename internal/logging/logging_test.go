package logging_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cronswap/cronswap/internal/logging"
)

func jsonLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(buf)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(&buf, logging.FormatJSON, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden at info")
	log.Info("schedule armed", "job_id", "daily_report", "next", time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	log.With("instance", "r1").Warn("reload failed", "attempt", 3, "err", errors.New("boom"))
	log.Error("gave up", slog.Group("mongo", slog.String("db", "cronswap")))

	lines := jsonLines(t, &buf)
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3 (debug filtered):\n%s", len(lines), buf.String())
	}
	checks := []map[string]any{
		{"level": "INFO", "msg": "schedule armed", "job_id": "daily_report", "next": "2030-01-01T09:00:00Z"},
		{"level": "WARN", "msg": "reload failed", "instance": "r1", "attempt": float64(3), "err": "boom"},
		{"level": "ERROR", "msg": "gave up", "mongo": map[string]any{"db": "cronswap"}},
	}
	for i, want := range checks {
		for k, v := range want {
			got := lines[i][k]
			if gm, ok := got.(map[string]any); ok {
				wm := v.(map[string]any)
				if len(gm) != len(wm) || gm["db"] != wm["db"] {
					t.Errorf("line %d %s = %v, want %v", i, k, got, v)
				}
				continue
			}
			if got != v {
				t.Errorf("line %d %s = %#v, want %#v", i, k, got, v)
			}
		}
		ts, ok := lines[i]["time"].(string)
		if !ok {
			t.Errorf("line %d has no time: %v", i, lines[i])
		} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("line %d time %q: %v", i, ts, err)
		}
	}
}

func TestLevels(t *testing.T) {
	tests := []struct {
		level string
		want  []string // messages that pass
	}{
		{"debug", []string{"d", "i", "w", "e"}},
		{"info", []string{"i", "w", "e"}},
		{"warn", []string{"w", "e"}},
		{"error", []string{"e"}},
		{"DEBUG", []string{"d", "i", "w", "e"}},
		{" Warn ", []string{"w", "e"}},
		{"info+2", []string{"w", "e"}},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log, err := logging.New(&buf, "json", tt.level)
		if err != nil {
			t.Errorf("level %q: %v", tt.level, err)
			continue
		}
		log.Debug("d")
		log.Info("i")
		log.Warn("w")
		log.Error("e")
		var got []string
		for _, l := range jsonLines(t, &buf) {
			got = append(got, l["msg"].(string))
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("level %q let through %q, want %q", tt.level, got, tt.want)
		}
	}
}

func TestTextNoColourOffTerminal(t *testing.T) {
	for _, format := range []string{logging.FormatText, ""} {
		var buf bytes.Buffer
		log, err := logging.New(&buf, format, "debug")
		if err != nil {
			t.Fatalf("format %q: %v", format, err)
		}
		log.Debug("dbg")
		log.Info("schedule armed", "job_id", "daily_report")
		log.Warn("slow", "took", 3*time.Second)
		log.Error("failed", "err", errors.New("boom"))
		out := buf.String()
		if strings.Contains(out, "\x1b") {
			t.Errorf("format %q to a buffer contains ANSI escapes:\n%q", format, out)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 4 {
			t.Fatalf("format %q: %d lines, want 4:\n%s", format, len(lines), out)
		}
		for i, want := range []string{"DBG dbg", "INF schedule armed job_id=daily_report", "WRN slow took=3s", "ERR failed err=boom"} {
			if !strings.Contains(lines[i], want) {
				t.Errorf("format %q line %d = %q, want it to contain %q", format, i, lines[i], want)
			}
		}
		// Time first, in the configured layout.
		if _, err := time.Parse(time.DateTime+".000", lines[1][:len(time.DateTime+".000")]); err != nil {
			t.Errorf("line %q does not start with a %s time: %v", lines[1], time.DateTime+".000", err)
		}
	}
}

func TestTextNoColourToRegularFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	log, err := logging.New(f, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("to a file", "k", "v")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("\x1b")) || !bytes.Contains(data, []byte("to a file k=v")) {
		t.Errorf("log file = %q, want plain text", data)
	}
}

func TestTextNoColourToPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log, err := logging.New(w, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("to a pipe")
	w.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "\x1b") || !strings.Contains(buf.String(), "to a pipe") {
		t.Errorf("pipe got %q, want plain text", buf.String())
	}
}

func TestBadArguments(t *testing.T) {
	tests := []struct {
		format, level string
		want          []string
	}{
		{"xml", "info", []string{"format", "xml", "text", "json"}},
		{"JSON ", "info", []string{"format"}},
		{"json", "loud", []string{"level", "loud", "debug"}},
		{"text", "", []string{"level"}},
		{"text", "verbose", []string{"level", "verbose"}},
	}
	for _, tt := range tests {
		log, err := logging.New(&bytes.Buffer{}, tt.format, tt.level)
		if err == nil {
			t.Errorf("New(%q, %q) succeeded", tt.format, tt.level)
			continue
		}
		if log != nil {
			t.Errorf("New(%q, %q) returned a logger with its error", tt.format, tt.level)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("New(%q, %q) error %q does not mention %q", tt.format, tt.level, err, w)
			}
		}
	}
}
