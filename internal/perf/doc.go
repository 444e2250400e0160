// Package perf holds no code of its own: its tests and benchmarks measure
// the path from the change stream to armed timers (watcher → decode →
// engine) against the test server, and check the warm restart end to end
// (watcher, engine, resume token store and state file together).
//
//	go test ./internal/perf -run XXX -bench . -benchtime 3x
//
// The benchmarks:
//
//   - BenchmarkTokenSave: one resume-token upsert on the server.
//   - BenchmarkApply: sustained events/s and event received → armed p50/p99,
//     saving the token after every event vs coalesced.
//   - BenchmarkFullReload100k: a full reload of 100,000 documents, split into
//     server read, decode and engine.
//   - BenchmarkRestart100k: watcher start with 100,000 schedules, from the
//     collection vs warm from the state file, and the state file's write.
//   - BenchmarkEngineSync100k: arming 100,000 schedules into a running vs a
//     stopped engine.
//
// The 100,000-document benchmarks keep their data in the database
// "cronswap_perf_bench" and reuse it across runs (on an external server it
// is left in place; drop it by hand).
package perf
