package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/cronswap/cronswap/internal/cli"
	"github.com/cronswap/cronswap/internal/testmongo"
)

// benchFile writes a schedules file of n jobs (about 90 bytes each, a
// zone on every third) and returns its path.
func benchFile(b *testing.B, n int) string {
	b.Helper()
	var buf bytes.Buffer
	for i := range n {
		if i > 0 {
			buf.WriteString("---\n")
		}
		fmt.Fprintf(&buf, "_id: bench_%07d\ncron_expr: \"%d %d * * *\"\n", i, i%60, (i/60)%24)
		if i%3 == 0 {
			buf.WriteString("timezone: Europe/Berlin\n")
		}
		if i%5 == 0 {
			fmt.Fprintf(&buf, "args: {shard: %d}\n", i%16)
		}
	}
	p := filepath.Join(b.TempDir(), "schedules.yaml")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

// benchConfig writes a config pointing at db.
func benchConfig(b *testing.B, db *mongo.Database) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "config.yaml")
	text := fmt.Sprintf("mongo:\n  uri: %q\n  database: %q\n", testmongo.Shared(b).URI, db.Name())
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		b.Fatal(err)
	}
	return p
}

func benchRun(b *testing.B, want int, args ...string) string {
	b.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(append([]string{"cronswap"}, append(args, "--timeout", "60s")...), strings.NewReader(""), &stdout, &stderr)
	if code != want {
		b.Fatalf("%q: exit %d, want %d\n%s\n%s", args, code, want, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// BenchmarkApply10kNew is `cronswap apply` of a file of 10,000 schedules
// none of which exists: one check of the whole file, then 10 unordered
// bulk inserts of 1,000 (and the reads that plan them). Each iteration
// starts from an empty collection.
func BenchmarkApply10kNew(b *testing.B) {
	const n = 10000
	client := testmongo.Client(b)
	file := benchFile(b, n)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		db := testmongo.NewDatabase(b, client)
		cfg := benchConfig(b, db)
		b.StartTimer()
		out := benchRun(b, cli.ExitOK, "apply", "-f", file, "--by", "bench", "--config", cfg)
		b.StopTimer()
		if !strings.Contains(out, fmt.Sprintf("%d created", n)) {
			b.Fatalf("apply: %s", out[max(0, len(out)-300):])
		}
		if err := db.Drop(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "schedules/s")
}

// BenchmarkPlan100kUnchanged is `cronswap plan` of a file of 100,000
// schedules that all match the collection: one check of the file, 100
// reads of 1,000 documents by id, the comparison, and the walk over the
// collection's ids for what the file does not name.
func BenchmarkPlan100kUnchanged(b *testing.B) {
	const n = 100000
	client := testmongo.Client(b)
	file := benchFile(b, n)
	db := testmongo.NewDatabase(b, client)
	cfg := benchConfig(b, db)
	benchRun(b, cli.ExitOK, "apply", "-f", file, "--by", "bench", "--config", cfg, "--max-file-size", "1GiB")
	if c, err := db.Collection("schedules").CountDocuments(context.Background(), bson.D{}); err != nil || c != n {
		b.Fatalf("%d schedules stored: %v", c, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out := benchRun(b, cli.ExitOK, "plan", "-f", file, "--config", cfg, "--max-file-size", "1GiB")
		if !strings.Contains(out, fmt.Sprintf("%d unchanged", n)) {
			b.Fatalf("plan: %s", out)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "schedules/s")
}
