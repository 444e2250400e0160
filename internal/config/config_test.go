package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests name, whatever the machine has

	"github.com/cronswap/cronswap/changestream"
	"github.com/cronswap/cronswap/internal/actions"
	"github.com/cronswap/cronswap/internal/config"
	"github.com/cronswap/cronswap/internal/firepath"
	"github.com/cronswap/cronswap/internal/members"
	"github.com/cronswap/cronswap/internal/record"
	"github.com/cronswap/cronswap/jobs"
)

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil || h == "" {
		t.Skipf("no hostname on this machine: %v", err)
	}
	return h
}

func readRepoConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config.yaml"))
	if err != nil {
		t.Fatalf("read the repository's config.yaml: %v", err)
	}
	return string(data)
}

// TestDefault pins the defaults the configuration docs and config.yaml
// document. The fire path's, the runs' and the watch section's settings are
// unset in Default(): internal/firepath, internal/record and changestream
// own their defaults, pinned here too.
func TestDefault(t *testing.T) {
	d := config.Default()
	checks := []struct {
		name      string
		got, want any
	}{
		{"mongo.uri", d.Mongo.URI, "mongodb://127.0.0.1:27017/"},
		{"mongo.database", d.Mongo.Database, "cronswap"},
		{"instance_id", d.InstanceID, ""},
		{"timezone", d.Timezone, "UTC"},
		{"watch (unset: the watcher's defaults)", d.Watch, config.Watch{}},
		{"watch.poll_interval", changestream.DefaultPollInterval, 5 * time.Second},
		{"watch.resync_interval", changestream.DefaultResyncInterval, 10 * time.Minute},
		{"watch.backoff_min", changestream.DefaultBackoffMin, 100 * time.Millisecond},
		{"watch.backoff_max", changestream.DefaultBackoffMax, 10 * time.Second},
		{"lock.ttl (0: firepath.DefaultLockTTL)", d.Lock.TTL, time.Duration(0)},
		{"runs.retention (0: record.DefaultRetention)", d.Runs.Retention, time.Duration(0)},
		{"workers (0: no bound)", d.Workers, 0},
		{"categories (none: no bound)", d.MaxRunning(), map[string]int(nil)},
		{"firepath.DefaultLockTTL", firepath.DefaultLockTTL, 10 * time.Minute},
		{"record.DefaultRetention", record.DefaultRetention, 720 * time.Hour},
		{"http.listen", d.HTTP.Listen, "127.0.0.1:9090"},
		{"shutdown.grace", d.Shutdown.Grace, 30 * time.Second},
		{"jobs", len(d.Jobs), 0},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("Default().%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if config.DefaultMongoURI != d.Mongo.URI {
		t.Errorf("DefaultMongoURI %q != Default().Mongo.URI %q", config.DefaultMongoURI, d.Mongo.URI)
	}
	// Default must itself be valid once finished, with the default mode.
	if err := d.Finish(); err != nil {
		t.Fatalf("Default().Finish(): %v", err)
	}
	if d.Watch.Mode != changestream.ModeAuto {
		t.Errorf("Default().Finish() watch.mode = %q, want %q", d.Watch.Mode, changestream.ModeAuto)
	}
	if d.Location != time.UTC {
		t.Errorf("Default().Finish() location = %v, want UTC", d.Location)
	}
}

// TestRepoConfigYAML parses the repository's config.yaml: it must be valid,
// list the example jobs, and (as its header says) show the defaults for
// everything that is not an example.
func TestRepoConfigYAML(t *testing.T) {
	text := readRepoConfig(t)
	cfg, err := config.Parse(text)
	if err != nil {
		t.Fatalf("Parse(config.yaml): %v", err)
	}

	hour := time.Hour
	wantJobs := map[string]actions.Definition{
		"daily_report": {
			Exec:    []string{"sh", "-c", "echo report for $CRONSWAP_SCHEDULED_AT"},
			Timeout: 5 * time.Minute,
			Overlap: jobs.OverlapSkip,
			Catchup: &hour,
			Retry:   &jobs.RetryPolicy{Attempts: 3, Backoff: 30 * time.Second, MaxBackoff: 10 * time.Minute},
			// 5 consecutive failed slots pause the job.
			PauseAfterFailures: 5,
		},
		"heartbeat": {
			Exec:    []string{"sh", "-c", "echo heartbeat $CRONSWAP_JOB_ID at $CRONSWAP_SCHEDULED_AT args=$CRONSWAP_ARGS"},
			Timeout: 30 * time.Second,
			Overlap: jobs.OverlapSkip,
		},
		"warm_cache": {
			HTTP:    &actions.HTTPSettings{URL: "http://127.0.0.1:9090/healthz", Method: "GET"},
			Timeout: 10 * time.Second,
			Overlap: jobs.OverlapSkip,
		},
	}
	if got := cfg.CatchupFor("daily_report"); got != time.Hour {
		t.Errorf("catch-up window of daily_report = %s, want 1h", got)
	}
	if got := cfg.CatchupFor("heartbeat"); got != 0 {
		t.Errorf("catch-up window of heartbeat = %s, want the default 0", got)
	}
	if !reflect.DeepEqual(cfg.Jobs, wantJobs) {
		t.Errorf("jobs:\n got %#v\nwant %#v", cfg.Jobs, wantJobs)
	}

	// Everything but the examples equals the defaults (after Finish).
	def := config.Default()
	if err := def.Finish(); err != nil {
		t.Fatal(err)
	}
	cfg.Jobs, def.Jobs = nil, nil
	// The file spells out the fire path's and the runs' defaults, which Default() leaves
	// zero for internal/firepath and internal/record to fill in.
	if cfg.Lock.TTL != firepath.DefaultLockTTL || cfg.Runs.Retention != record.DefaultRetention {
		t.Errorf("config.yaml: lock.ttl %s, runs.retention %s; want the defaults of internal/firepath and internal/record %s, %s",
			cfg.Lock.TTL, cfg.Runs.Retention, firepath.DefaultLockTTL, record.DefaultRetention)
	}
	cfg.Lock.TTL, cfg.Runs.Retention = 0, 0
	// And the membership's, owned by members and the fire path.
	if m := cfg.Members; m.Heartbeat != members.DefaultHeartbeat || m.Lease != members.DefaultLease || m.ClaimGrace != firepath.DefaultClaimGrace {
		t.Errorf("config.yaml: members %+v; want the defaults heartbeat %s, lease %s, claim_grace %s",
			m, members.DefaultHeartbeat, members.DefaultLease, firepath.DefaultClaimGrace)
	}
	cfg.Members = def.Members
	// The watch section spells out the watcher's defaults.
	wantWatch := changestream.Options{Mode: changestream.ModeAuto, PollInterval: changestream.DefaultPollInterval,
		ResyncInterval: changestream.DefaultResyncInterval,
		BackoffMin:     changestream.DefaultBackoffMin, BackoffMax: changestream.DefaultBackoffMax}
	if got := cfg.Watch.Apply(changestream.Options{}); !reflect.DeepEqual(got, wantWatch) {
		t.Errorf("config.yaml's watch section %+v, want the watcher's defaults %+v", got, wantWatch)
	}
	cfg.Watch = def.Watch
	if cfg.InstanceID != hostname(t) {
		t.Errorf("instance_id = %q, want the hostname %q", cfg.InstanceID, hostname(t))
	}
	if !reflect.DeepEqual(cfg, def) {
		t.Errorf("config.yaml's non-example values differ from Default():\n file    %+v\n default %+v", cfg, def)
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	for _, text := range []string{"", "# only a comment\n", "---\n", "{}"} {
		cfg, err := config.Parse(text)
		if err != nil {
			t.Errorf("Parse(%q): %v", text, err)
			continue
		}
		def := config.Default()
		if err := def.Finish(); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, def) {
			t.Errorf("Parse(%q) = %+v, want the defaults %+v", text, cfg, def)
		}
	}
}

func TestParseValues(t *testing.T) {
	cfg, err := config.Parse(`
mongo: {uri: "mongodb://db.example:27018/", database: other}
instance_id: replica-7
timezone: Asia/Seoul
watch: {mode: poll, poll_interval: 250ms, resync_interval: 0s, backoff_min: 1s, backoff_max: 1s}
lock: {ttl: 90s}
runs: {retention: 24h}
http: {listen: "127.0.0.1:0"}
shutdown: {grace: 0s}
jobs:
  a: {exec: [/bin/true], overlap: allow}
  b: {http: {url: "http://127.0.0.1:1/x"}}
`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != "mongodb://db.example:27018/" || cfg.Mongo.Database != "other" {
		t.Errorf("mongo = %+v", cfg.Mongo)
	}
	if cfg.InstanceID != "replica-7" {
		t.Errorf("instance_id = %q", cfg.InstanceID)
	}
	if cfg.Timezone != "Asia/Seoul" || cfg.Location == nil || cfg.Location.String() != "Asia/Seoul" {
		t.Errorf("timezone = %q, location = %v", cfg.Timezone, cfg.Location)
	}
	want := config.Watch{Mode: changestream.ModePoll, PollInterval: new(250 * time.Millisecond), ResyncInterval: new(time.Duration(0)),
		BackoffMin: new(time.Second), BackoffMax: new(time.Second)}
	if !reflect.DeepEqual(cfg.Watch, want) {
		t.Errorf("watch = %+v, want %+v", cfg.Watch, want)
	}
	if cfg.Lock.TTL != 90*time.Second || cfg.Runs.Retention != 24*time.Hour || cfg.HTTP.Listen != "127.0.0.1:0" || cfg.Shutdown.Grace != 0 {
		t.Errorf("lock %+v runs %+v http %+v shutdown %+v", cfg.Lock, cfg.Runs, cfg.HTTP, cfg.Shutdown)
	}
	if got := cfg.Jobs["a"].Overlap; got != jobs.OverlapAllow {
		t.Errorf("jobs.a.overlap = %q, want allow", got)
	}
	if got := cfg.Jobs["b"].Overlap; got != jobs.OverlapSkip {
		t.Errorf("jobs.b.overlap = %q, want the default forbid", got)
	}
	if got := cfg.Jobs["b"].HTTP; got == nil || got.URL != "http://127.0.0.1:1/x" || got.Method != "" {
		t.Errorf("jobs.b.http = %+v", got)
	}
}

// The members section reaches the config as written; absent, it is zero
// (the defaults of the membership and the fire path).
func TestMembersTiming(t *testing.T) {
	cfg, err := config.Parse("members: {heartbeat: 2s, lease: 6s, claim_grace: 1s}")
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Members{Heartbeat: 2 * time.Second, Lease: 6 * time.Second, ClaimGrace: time.Second}); cfg.Members != want {
		t.Errorf("members = %+v, want %+v", cfg.Members, want)
	}
	cfg, err = config.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Members != (config.Members{}) {
		t.Errorf("members absent = %+v, want zero", cfg.Members)
	}
}

func TestOverlapDefaultsToForbid(t *testing.T) {
	cfg, err := config.Parse("jobs:\n  x: {exec: [echo, hi]}\n  y: {exec: [echo], overlap: forbid}\n  z: {exec: [echo], overlap: allow}\n")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]jobs.Overlap{"x": jobs.OverlapSkip, "y": jobs.OverlapSkip, "z": jobs.OverlapAllow} {
		if got := cfg.Jobs[name].Overlap; got != want {
			t.Errorf("jobs.%s.overlap = %q, want %q", name, got, want)
		}
	}
}

func TestParseEmptyFieldsFallBack(t *testing.T) {
	cfg, err := config.Parse(`{mongo: {uri: "", database: ""}, timezone: "", watch: {mode: ""}}`)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != config.DefaultMongoURI || cfg.Mongo.Database != "cronswap" || cfg.Timezone != "UTC" ||
		cfg.Location != time.UTC || cfg.Watch.Mode != changestream.ModeAuto {
		t.Errorf("empty values did not fall back to the defaults: %+v", cfg)
	}
}

func TestInstanceIDDefaultsToHostname(t *testing.T) {
	cfg, err := config.Parse(`instance_id: ""`)
	if err != nil {
		t.Fatal(err)
	}
	if want := hostname(t); cfg.InstanceID != want {
		t.Errorf("instance_id = %q, want the hostname %q", cfg.InstanceID, want)
	}
}

// TestParseErrors: every bad value is refused with a message naming the key
// (and, where useful, the bad value).
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"unknown key (typo in watch.mode)", "watch: {mod: poll}", []string{"mod"}},
		{"unknown top-level key", "instanceid: x", []string{"instanceid"}},
		{"unknown job key", "jobs: {a: {exec: [x], timout: 5s}}", []string{"timout"}},
		{"unknown http action key", "jobs: {a: {http: {url: 'http://x', methd: GET}}}", []string{"methd"}},
		{"watch.mode bogus", "watch: {mode: bogus}", []string{"watch.mode", "bogus"}},
		{"watch.poll_interval zero", "watch: {poll_interval: 0s}", []string{"watch.poll_interval"}},
		{"watch.poll_interval negative", "watch: {poll_interval: -5s}", []string{"watch.poll_interval", "-5s"}},
		{"watch.poll_interval not a duration", "watch: {poll_interval: soon}", []string{"soon"}},
		{"watch.poll_interval bare number", "watch: {poll_interval: 5}", []string{"5"}},
		{"watch.resync_interval negative", "watch: {resync_interval: -1m}", []string{"watch.resync_interval"}},
		{"watch.backoff_min zero", "watch: {backoff_min: 0s}", []string{"watch.backoff_min"}},
		{"watch.backoff_max below min", "watch: {backoff_min: 2s, backoff_max: 1s}", []string{"backoff_max"}},
		{"watch.backoff_max below the default min", "watch: {backoff_max: 50ms}", []string{"backoff_max", "50ms"}},
		{"watch.backoff_min above the default max", "watch: {backoff_min: 20s}", []string{"backoff_min", "20s"}},
		{"lock.ttl negative", "lock: {ttl: -10m}", []string{"lock.ttl", "-10m"}},
		{"members.heartbeat below a second", "members: {heartbeat: 500ms}", []string{"members.heartbeat", "500ms", "at least 1s"}},
		{"members.lease below twice the heartbeat", "members: {heartbeat: 2s, lease: 3s}", []string{"members.lease", "3s", "twice", "2s"}},
		{"members.heartbeat over half the default lease", "members: {heartbeat: 20s}", []string{"members.heartbeat", "set members.lease"}},
		{"members.claim_grace negative", "members: {claim_grace: -1s}", []string{"members.claim_grace"}},
		{"runs.retention negative", "runs: {retention: -1h}", []string{"runs.retention"}},
		{"workers negative", "workers: -2", []string{"workers", "-2"}},
		{"shutdown.grace negative", "shutdown: {grace: -1s}", []string{"shutdown.grace"}},
		{"job with exec and http", "jobs: {both: {exec: [x], http: {url: 'http://x'}}}", []string{"jobs.both", "exec", "http"}},
		{"job with neither", "jobs: {none: {timeout: 5s}}", []string{"jobs.none", "exec", "http"}},
		{"job with nothing at all", "jobs: {empty: {}}", []string{"jobs.empty"}},
		{"job with empty exec list", "jobs: {e: {exec: []}}", []string{"jobs.e"}},
		{"job with empty program", "jobs: {e: {exec: ['', x]}}", []string{"jobs.e", "exec[0]"}},
		{"job with empty http.url", "jobs: {h: {http: {method: POST}}}", []string{"jobs.h", "http.url"}},
		{"job with bad overlap", "jobs: {o: {exec: [x], overlap: sometimes}}", []string{"jobs.o", "overlap", "sometimes"}},
		{"job with negative timeout", "jobs: {t: {exec: [x], timeout: -1s}}", []string{"jobs.t", "timeout"}},
		{"job with negative jitter", "jobs: {j: {exec: [x], jitter: -1s}}", []string{"jobs.j", "jitter"}},
		{"job with negative catchup", "jobs: {c: {exec: [x], catchup: -1s}}", []string{"jobs.c", "catchup"}},
		{"unknown timezone", "timezone: Mars/Base", []string{"timezone", "Mars/Base"}},
		{"Local timezone refused", "timezone: Local", []string{"timezone", "Local"}},
		{"timezone with a space", "timezone: 'Europe/ Berlin'", []string{"timezone"}},
		{"wrong type", "watch: [poll]", []string{"config.Watch"}},
		{"duplicate key", "lock: {ttl: 1m}\nlock: {ttl: 2m}", []string{"lock"}},
		{"second document", "lock: {ttl: 1m}\n---\nlock: {ttl: 2m}\n", []string{"line 3", "second YAML document"}},
		{"unknown key after an empty document", "---\n---\nfoo: 1\n", []string{"foo"}},
		{"not YAML", "mongo: {uri: [", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse(tt.yaml)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error", tt.yaml)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) error %q does not mention %q", tt.yaml, err, w)
				}
			}
		})
	}
}

// Zero (or absent) lock.ttl, runs.retention and workers mean the jobs
// package's defaults (for workers: no bound): the config keeps no second
// copy of them.
func TestFirePathZeroMeansDefault(t *testing.T) {
	cfg, err := config.Parse("lock: {ttl: 0s}\nruns: {retention: 0s}\nworkers: 0\n")
	if err != nil {
		t.Fatalf("zero lock.ttl, runs.retention and workers mean the defaults and must be accepted: %v", err)
	}
	if cfg.Lock.TTL != 0 || cfg.Runs.Retention != 0 || cfg.Workers != 0 {
		t.Errorf("lock %+v runs %+v workers %d: want them left zero", cfg.Lock, cfg.Runs, cfg.Workers)
	}
}

func TestParseAllowsEmptyDocuments(t *testing.T) {
	for _, text := range []string{"lock: {ttl: 3m}\n---\n", "---\nlock: {ttl: 3m}\n", "---\n---\nlock: {ttl: 3m}\n", "~\n---\nlock: {ttl: 3m}\n...\n"} {
		cfg, err := config.Parse(text)
		if err != nil {
			t.Errorf("Parse(%q): empty documents should be harmless: %v", text, err)
			continue
		}
		if cfg.Lock.TTL != 3*time.Minute {
			t.Errorf("Parse(%q): lock.ttl = %v, want 3m", text, cfg.Lock.TTL)
		}
	}
}

func TestResyncIntervalZeroDisables(t *testing.T) {
	cfg, err := config.Parse("watch: {resync_interval: 0s}")
	if err != nil {
		t.Fatalf("resync_interval 0 means off and must be accepted: %v", err)
	}
	if cfg.Watch.ResyncInterval == nil || *cfg.Watch.ResyncInterval != 0 {
		t.Errorf("resync_interval = %v", cfg.Watch.ResyncInterval)
	}
	if got := cfg.Watch.Apply(changestream.Options{}).ResyncInterval; got >= 0 {
		t.Errorf("resync_interval 0 gives the watcher ResyncInterval %v, want a negative one (off)", got)
	}
}

// A watch key left out leaves the watcher option zero (its default); one
// given is passed on.
func TestWatchKeysLeftOutTakeTheWatchersDefaults(t *testing.T) {
	cfg, err := config.Parse("watch: {poll_interval: 2s}")
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Watch.Apply(changestream.Options{ID: "kept"})
	want := changestream.Options{ID: "kept", Mode: changestream.ModeAuto, PollInterval: 2 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Apply = %+v, want %+v", got, want)
	}
}

// FinishAfterFlags: the CLI changes fields by hand and calls Finish again.
func TestFinishRevalidates(t *testing.T) {
	cfg, err := config.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timezone = "Europe/Berlin"
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if cfg.Location.String() != "Europe/Berlin" {
		t.Errorf("Location = %v after Finish with Europe/Berlin", cfg.Location)
	}
	cfg.Watch.Mode = "push"
	if err := cfg.Finish(); err == nil || !strings.Contains(err.Error(), "watch.mode") {
		t.Errorf("Finish with watch.mode push: err = %v, want one naming watch.mode", err)
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cronswap.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func clearEnv(t *testing.T) {
	t.Setenv(config.EnvMongoURI, "")
	t.Setenv(config.EnvInstanceID, "")
	t.Setenv(config.EnvConfig, "")
}

func TestLoadFile(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, "mongo: {uri: 'mongodb://file:1/'}\ninstance_id: from-file\njobs: {a: {exec: [x]}}\n")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != "mongodb://file:1/" || cfg.InstanceID != "from-file" || len(cfg.Jobs) != 1 {
		t.Errorf("Load = %+v", cfg)
	}
}

func TestLoadRepoConfig(t *testing.T) {
	clearEnv(t)
	cfg, err := config.Load(filepath.Join("..", "..", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Jobs) != 3 || cfg.InstanceID != hostname(t) {
		t.Errorf("Load(config.yaml): jobs %d, instance %q", len(cfg.Jobs), cfg.InstanceID)
	}
}

func TestLoadNoFile(t *testing.T) {
	clearEnv(t)
	cfg, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != config.DefaultMongoURI || cfg.InstanceID != hostname(t) || cfg.Location != time.UTC {
		t.Errorf("Load(\"\") = %+v, want the defaults", cfg)
	}
}

func TestLoadEnvOverrides(t *testing.T) {
	clearEnv(t)
	t.Setenv(config.EnvMongoURI, "mongodb://env:2/")
	t.Setenv(config.EnvInstanceID, "from-env")
	path := writeFile(t, "mongo: {uri: 'mongodb://file:1/'}\ninstance_id: from-file\n")
	for _, p := range []string{path, ""} {
		cfg, err := config.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Mongo.URI != "mongodb://env:2/" {
			t.Errorf("Load(%q): mongo.uri = %q, want the environment's", p, cfg.Mongo.URI)
		}
		if cfg.InstanceID != "from-env" {
			t.Errorf("Load(%q): instance_id = %q, want the environment's", p, cfg.InstanceID)
		}
	}
}

func TestLoadEmptyEnvDoesNotOverride(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, "mongo: {uri: 'mongodb://file:1/'}\ninstance_id: from-file\n")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mongo.URI != "mongodb://file:1/" || cfg.InstanceID != "from-file" {
		t.Errorf("empty environment variables overrode the file: %+v", cfg)
	}
}

func TestLoadMissingFile(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "does-not-exist.yaml")
	_, err := config.Load(path)
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the path %s", err, path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %q does not wrap fs.ErrNotExist", err)
	}
}

func TestLoadBadFileNamesPathAndKey(t *testing.T) {
	clearEnv(t)
	for _, text := range []string{"watch: {mod: poll}\n", "watch: {mode: bogus}\n"} {
		path := writeFile(t, text)
		_, err := config.Load(path)
		if err == nil {
			t.Fatalf("Load(%q) succeeded", text)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "mod") {
			t.Errorf("Load of %q: error %q should name the file and the key", text, err)
		}
	}
}

func TestLoadEnvURIIsValidatedWithFile(t *testing.T) {
	// An environment override does not bypass validation of the rest.
	clearEnv(t)
	t.Setenv(config.EnvMongoURI, "mongodb://env:2/")
	path := writeFile(t, "timezone: Mars/Base\n")
	if _, err := config.Load(path); err == nil || !strings.Contains(err.Error(), "Mars/Base") {
		t.Errorf("err = %v, want the bad timezone reported", err)
	}
}

// state_file's directory is the daemon's machine's: the load accepts a
// file whose directory is missing here (every command loads the config,
// on workstations too), and CheckStateFile, which the daemon runs at
// start, refuses it naming the key.
func TestStateFileDirectoryCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse("state_file: " + filepath.Join(dir, "state"))
	if err != nil {
		t.Fatalf("state_file in an existing directory: %v", err)
	}
	if err := cfg.CheckStateFile(); err != nil {
		t.Errorf("CheckStateFile, the directory existing: %v", err)
	}
	cfg, err = config.Parse("state_file: " + filepath.Join(dir, "missing", "state"))
	if err != nil {
		t.Fatalf("state_file in a missing directory refused at load: %v", err)
	}
	err = cfg.CheckStateFile()
	if err == nil || !strings.Contains(err.Error(), "state_file") || !strings.Contains(err.Error(), "must exist") {
		t.Fatalf("CheckStateFile, the directory missing: err = %v, want a clear refusal naming state_file", err)
	}
}

// http.pprof is off by default and only accepted on a loopback listener.
func TestHTTPPprofOnLoopbackOnly(t *testing.T) {
	if config.Default().HTTP.Pprof {
		t.Fatal("http.pprof on by default")
	}
	for _, c := range []struct {
		listen string
		ok     bool
	}{
		{"127.0.0.1:9090", true}, {"[::1]:9090", true}, {"localhost:9090", true},
		{"0.0.0.0:9090", false}, {":9090", false}, {"10.1.2.3:9090", false},
	} {
		_, err := config.Parse("http: {listen: \"" + c.listen + "\", pprof: true}\n")
		if (err == nil) != c.ok {
			t.Errorf("listen %s with pprof: error %v, want accepted %v", c.listen, err, c.ok)
		}
	}
	if _, err := config.Parse("http: {listen: \"0.0.0.0:9090\"}\n"); err != nil {
		t.Errorf("a non-loopback listener without pprof refused: %v", err)
	}
}

// An empty http.listen has no meaning (the listener cannot be turned
// off) and would bind every interface on a random port: it is refused at
// load, naming the key, like a listen address without a port.
func TestHTTPListenEmptyOrWithoutPortRefused(t *testing.T) {
	for text, want := range map[string]string{
		`http: {listen: ""}`:     "http.listen is empty",
		`http: {listen: "9090"}`: `http.listen "9090"`,
	} {
		if _, err := config.Parse(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s): err = %v, want %q", text, err, want)
		}
	}
	cfg, err := config.Parse(`http: {listen: "[::1]:0"}`)
	if err != nil || cfg.HTTP.Listen != "[::1]:0" {
		t.Errorf("listen [::1]:0: %q, %v", cfg.HTTP.Listen, err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:80": false} {
		if got := config.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}
