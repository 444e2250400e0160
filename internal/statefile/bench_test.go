package statefile

import (
	"bytes"
	"context"
	"encoding/gob"
	"os"
	"path/filepath"
	"testing"

	"github.com/cronswap/cronswap/schedule"
)

// BenchmarkFormat100k compares, for 100,000 schedules, what a warm start
// has to do with this package's format (read the file, check it, split
// it, then schedule.Decode each document as a full reload does) against a
// gob file of already decoded schedules (read and gob-decode).
func BenchmarkFormat100k(b *testing.B) {
	ctx := context.Background()
	st := state(b, "bench", 100_000)
	dir := b.TempDir()
	f := New(filepath.Join(dir, "state"), opts)
	if err := f.Save(ctx, st); err != nil {
		b.Fatal(err)
	}
	var scheds []schedule.Schedule
	for _, d := range collect(b, st) {
		s, err := schedule.Decode(d)
		if err != nil {
			b.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	gobPath := filepath.Join(dir, "state.gob")
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(scheds); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(gobPath, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	b.Run("bson/save", func(b *testing.B) {
		for b.Loop() {
			if err := f.Save(ctx, st); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bson/load+decode", func(b *testing.B) {
		for b.Loop() {
			got, err := f.Load(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for d, err := range got.Docs {
				if err != nil {
					b.Fatal(err)
				}
				if _, err := schedule.Decode(d); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("bson/load", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Load(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gob/load+decode", func(b *testing.B) {
		for b.Loop() {
			raw, err := os.ReadFile(gobPath)
			if err != nil {
				b.Fatal(err)
			}
			var got []schedule.Schedule
			if err := gob.NewDecoder(bytes.NewReader(raw)).Decode(&got); err != nil || len(got) != len(scheds) {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(buf.Len())/1e6, "gob_MB")
}
