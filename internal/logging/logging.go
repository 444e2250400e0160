// Package logging builds the daemon's slog logger: tint's coloured text for
// humans (colour only on a terminal) or JSON for machines.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
)

// Formats accepted by New.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// New returns a logger writing to w in format ("text" or "json") at level
// ("debug", "info", "warn", "error").
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.TrimSpace(level))); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	switch format {
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	case FormatText, "":
		return slog.New(tint.NewTextHandler(w, &tint.Options{
			Level:      lvl,
			TimeFormat: time.DateTime + ".000",
			NoColor:    !isTerminal(w),
		})), nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
