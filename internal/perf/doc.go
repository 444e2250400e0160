// Package perf holds no code of its own: its tests and benchmarks measure
// the path from the change stream to armed timers (watcher → decode →
// engine) against the test server, and check the warm restart end to end
// (watcher, engine, resume token store and state file together).
//
//	go test ./internal/perf -run XXX -bench . -benchtime 3x
//
// BenchmarkTokenSave         cost of one resume-token upsert on the server
// BenchmarkApply             sustained events/s and received→armed p50/p99,
//
//	with a save per event vs coalesced saves
//
// BenchmarkFullReload100k    full reload of 100,000 documents: read, decode, engine
// BenchmarkRestart100k       watcher start with 100,000 schedules: full
//
//	reload vs warm start from the state file
//
// The 100,000-document benchmarks keep their data in the database
// "cronswap_perf_bench" and reuse it across runs (on an external server it
// is left in place; drop it by hand).
package perf
