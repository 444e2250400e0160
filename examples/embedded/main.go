// Command embedded is a Go service that runs cronswap inside itself: its
// own MongoDB client, its own HTTP server, and a Go function as the action
// of the schedules whose job field is "report".
//
//	go run ./examples/embedded -mongo-uri mongodb://127.0.0.1:27017/ -database app
//
// Then, in mongosh, a schedule is one document (and an edit re-arms it at
// once, in every replica of the service):
//
//	db.schedules.insertOne({ _id: "daily_report", cron_expr: "@every 10s", job: "report", args: { region: "eu" } })
//
// Each run writes one document to the reports collection, keyed by the
// job and its slot, and /api/schedules on -listen shows the job.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/cronswap/cronswap/daemon"
	"github.com/cronswap/cronswap/jobs"
)

func main() {
	host, _ := os.Hostname()
	uri := flag.String("mongo-uri", "mongodb://127.0.0.1:27017/", "MongoDB connection string")
	database := flag.String("database", "app", "the database holding the schedules")
	instance := flag.String("instance-id", host, "this replica's id, unique among the running ones")
	listen := flag.String("listen", "127.0.0.1:8080", "address of the service's HTTP server")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *uri, *database, *instance, *listen, log); err != nil {
		log.Error("stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, uri, database, instance, listen string, log *slog.Logger) error {
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	db := client.Database(database)

	s, err := daemon.New(db, daemon.Options{InstanceID: instance, Logger: log})
	if err != nil {
		return err
	}
	reports := db.Collection("reports")
	err = s.Handle("report", jobs.HandlerFunc(func(ctx context.Context, run jobs.Run) error {
		var args struct {
			Region string `json:"region"`
		}
		if err := json.Unmarshal(run.Args, &args); err != nil {
			return fmt.Errorf("args: %w", err) // the run is recorded failed with this error
		}
		// ctx ends when the run must stop (lease lost, timeout, shutdown):
		// pass it to everything the run waits on.
		_, err := reports.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: run.JobID + "@" + run.Slot.Format(time.RFC3339)}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "region", Value: args.Region}, {Key: "instance", Value: run.InstanceID},
				{Key: "fence", Value: run.Fence}, {Key: "written_at", Value: time.Now()}}}},
			options.UpdateOne().SetUpsert(true))
		return err
	}), jobs.Policy{Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}

	// cronswap's /api/, /ui/, /metrics, /healthz and /readyz beside the
	// service's own routes.
	mux := http.NewServeMux()
	mux.Handle("/", s.HTTPHandler())
	mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello from", instance) })
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	serveErr := make(chan error, 1)
	go func() {
		err := srv.ListenAndServe()
		if !errors.Is(err, http.ErrServerClosed) {
			stopRun() // no HTTP server: stop the service too
		}
		serveErr <- err
	}()

	runErr := s.Run(ctx) // returns once ctx ends (SIGINT, SIGTERM), after a graceful shutdown
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return errors.Join(runErr, err)
	}
	return runErr
}
