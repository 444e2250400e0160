package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/daemon"
	"github.com/cronswap/cronswap/internal/testmongo"
	"github.com/cronswap/cronswap/jobs"
)

// mongoURI is the test server's address: the examples connect to it as a
// program connects to its own MongoDB.
var mongoURI string

// TestMain starts the test server (internal/testmongo) for the tests and
// the examples of the package.
func TestMain(m *testing.M) { testmongo.Main(m, func(uri string) { mongoURI = uri }) }

// exampleDatabase is a database of the test server for one example, with
// one schedule: daily_report, every second, run by the handler "report"
// with {"region": "eu"}. drop removes it and disconnects.
func exampleDatabase(name string) (db *mongo.Database, drop func()) {
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		panic(err)
	}
	db = client.Database(name)
	if _, err := db.Collection("schedules").InsertOne(context.Background(), bson.D{
		{Key: "_id", Value: "daily_report"}, {Key: "cron_expr", Value: "@every 1s"},
		{Key: "job", Value: "report"}, {Key: "args", Value: bson.D{{Key: "region", Value: "eu"}}},
	}); err != nil {
		panic(err)
	}
	return db, func() {
		_ = db.Drop(context.Background())
		_ = client.Disconnect(context.Background())
	}
}

// A Go service runs cronswap on its own database, with a Go function as the
// action of the schedules whose job field is "report". The schedule
// (daily_report, every second) is a document; a mongosh edit of its
// cron_expr re-arms it at once.
func Example() {
	db, drop := exampleDatabase("example_embed")
	defer drop()

	s, err := daemon.New(db, daemon.Options{InstanceID: "web-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	var once sync.Once
	err = s.Handle("report", jobs.HandlerFunc(func(ctx context.Context, run jobs.Run) error {
		var args struct {
			Region string `json:"region"`
		}
		if err := json.Unmarshal(run.Args, &args); err != nil {
			return err // the run is recorded failed, with this error
		}
		once.Do(func() {
			fmt.Printf("%s: report for %s, run on %s\n", run.JobID, args.Region, run.InstanceID)
			stop() // one run is enough for the example
		})
		return nil
	}), jobs.Policy{Timeout: 5 * time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Run returns once ctx ends, after a graceful shutdown.
	if err := s.Run(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// daily_report: report for eu, run on web-1
}

// The service's HTTP surface — the status API, the status page, /metrics
// and the health checks — mounted beside the program's own routes; nothing
// listens unless the program serves it.
func ExampleService_HTTPHandler() {
	db, drop := exampleDatabase("example_http")
	defer drop()

	s, err := daemon.New(db, daemon.Options{InstanceID: "web-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = s.Handle("report", jobs.HandlerFunc(func(context.Context, jobs.Run) error { return nil }), jobs.Policy{})
	mux := http.NewServeMux()
	mux.Handle("/", s.HTTPHandler()) // /api/, /ui/, /metrics, /healthz, /readyz
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	srv := httptest.NewServer(mux) // a program's own http.Server does the same
	defer srv.Close()

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { stop(); <-done }()

	// Ready once the schedules are loaded.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(srv.URL + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
	}
	resp, err := http.Get(srv.URL + "/api/schedules/daily_report")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	var job struct {
		ID       string `json:"id"`
		CronExpr string `json:"cron_expr"`
		Armed    bool   `json:"armed"`
		Job      string `json:"job"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&job); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %q armed=%v handler=%s\n", job.ID, job.CronExpr, job.Armed, job.Job)
	// Output:
	// daily_report: "@every 1s" armed=true handler=report
}

// A program waits for the service to fire its schedules before it reports
// itself ready or starts what depends on them; Run's return tells it the
// service stopped first.
func ExampleService_Firing() {
	db, drop := exampleDatabase("example_firing")
	defer drop()

	s, err := daemon.New(db, daemon.Options{InstanceID: "worker-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	ran := make(chan string, 1)
	if err := s.Handle("report", jobs.HandlerFunc(func(_ context.Context, run jobs.Run) error {
		select {
		case ran <- run.JobID:
		default:
		}
		return nil
	}), jobs.Policy{}); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()

	select {
	case <-s.Firing():
		fmt.Println("firing: every schedule is armed")
	case err := <-errc:
		fmt.Println("stopped before firing:", err)
		return
	}
	select {
	case id := <-ran:
		fmt.Println("first run:", id)
	case err := <-errc:
		fmt.Println("stopped before a run:", err)
		return
	}
	cancel()
	<-errc
	// Output:
	// firing: every schedule is armed
	// first run: daily_report
}

// The cronswap_* metrics on the program's own Prometheus registry, which
// the program serves with the rest of its metrics.
func ExampleOptions_registerer() {
	db, drop := exampleDatabase("example_metrics")
	defer drop()

	reg := prometheus.NewRegistry()
	if _, err := daemon.New(db, daemon.Options{InstanceID: "web-1", Registerer: reg, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		fmt.Println(err)
		return
	}
	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if f.GetName() == "cronswap_schedules_armed" {
			fmt.Println(f.GetName(), f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// A second service on the same registerer is refused.
	_, err = daemon.New(db, daemon.Options{InstanceID: "web-2", Registerer: reg})
	fmt.Println("second service on the same registry refused:", err != nil)
	// Output:
	// cronswap_schedules_armed 0
	// second service on the same registry refused: true
}
