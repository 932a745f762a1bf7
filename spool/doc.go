// Package spool is bridge's durable queue: every sample is appended to a
// JSON Lines file before any tracker sees it, and each tracker's
// acknowledgements are appended as they come. What a tracker has not
// acknowledged survives an outage and a crash or kill of bridge; a
// restarted bridge or `bridge sync` sends it later.
//
// # Records
//
// One JSON object a line, told apart by "type":
//
//	{"type":"start","time":ms,"attempt":N,"pid":P,"version":"..","runs":{"mlflow":"<run id>"},"info":{..}}
//	{"type":"sample","seq":N,"ts":ms,"metrics":{"container_...":1.5,...}}
//	{"type":"ack","sink":"mlflow","run":"<run id>","seq":N}   all samples <= N acknowledged
//	{"type":"run","time":ms,"sink":"mlflow","run":"<run id>","attempt":N,"info":{..}}
//	    the run of attempt N (no attempt: the last one) found after its
//	    start record; merged into that start record when read
//	{"type":"end","time":ms,"exit_code":N,"info":{..}}       a clean shutdown
//
// Non-finite values are written as the strings "NaN", "Infinity",
// "-Infinity". Each start record begins an attempt (a run of bridge on the
// file); the samples after it are that attempt's.
//
// # One writer
//
// A spool has one writer at a time: OpenWith takes an exclusive lock on the
// file (flock, which the kernel releases when the holder dies, kill -9
// included) and fails with ErrLocked while another live process holds it.
// NewMemory is the spool of a job that could not open its file: samples
// wait in memory for the trackers, and nothing is kept.
//
// # Which samples go to which run
//
// A sample belongs to the run(s) its attempt recorded, in its start record
// or in a run record naming it: Track(sink, run) and Pending offer a sink's
// run only the samples of attempts that recorded that run for it (an
// attempt that resumes a lost attempt's run records the same run, and
// shares it). So a reused file never sends one job's samples into another
// job's run; acks are per (sink, run). Samples before any start record (a
// file bridge did not write) belong to every run.
//
// # Durability: one fsync rule
//
// Every record is written with one write(2) as it comes (by the writer's
// goroutine, see Concurrency), so a crash or kill of bridge loses nothing
// the file has. With Options.SyncEvery = D > 0, the first record
// written after an fsync that no tracker holds starts a timer of D; when it
// fires, the file is fsynced unless, by then, everything written since the
// last fsync is held by the trackers. The trackers hold a sample once every
// tracked sink of its attempt acknowledged it; acks are never waited for;
// start, run and end records always are. An ack that leaves nothing
// waiting stops the timer. So a machine crash loses at most D of what no
// tracker had, there is no fsync for what every tracker acknowledged (with
// a healthy tracker, none for samples), and with no tracker one fsync
// every D. Also: 1 MiB written unsynced is fsynced at once (it is kept in
// memory until then, and written again if the fsync fails); Close and the
// size cap's rewrite fsync first; D = 0 fsyncs every write.
//
// # Failures and bounds
//
// The file survives a crash at any byte: OpenWith repairs an unterminated
// last line (kept when it is a whole record, cut off otherwise), and skips
// and counts lines that are not records and values that are not numbers
// (a bad value costs only itself). A file that cannot be written (disk
// full) costs durability, never samples: they wait in a buffer bounded in
// samples and bytes (Options.MaxBuffered, MaxBufferedBytes; past them the
// oldest are dropped and counted) that the next successful write flushes
// in order. Only the newest unacknowledged samples are kept in memory,
// within Options.MemSamples and MemBytes; older ones are read back from
// the file, at most 8 MiB a Pending. Bytes count what a sample holds in
// memory (its points, and its names by its line), so that no sample shape
// multiplies a window past its bound. The size cap (Options.MaxSize; the
// zero value is no cap) drops samples, delivered ones first. No record is
// written that a reader would skip: a sample keeps at most MaxPoints
// points, names of at most MaxKey bytes, and fits MaxLine (passed-through
// scrape series are left out first); the excess is counted and said once.
//
// # Concurrency
//
// A Spool is safe for concurrent use: the sampler appends while forwarders
// read Pending and Ack. Its lock guards memory only: every write, fsync and
// size-cap rewrite is made by one goroutine of the spool, out of the lock,
// so a disk that stalls (a hard NFS mount) holds that goroutine alone.
// Writes (Append, Ack, WriteStart, WriteRun, WriteEnd) never wait for the
// disk and fail only on a closed spool; what the disk has not taken waits
// in the bounded buffer of Failures and bounds. A tracker is offered a
// sample once the file has it, or from memory while the file fails or a
// call on it has not returned for a second (Written ends that wait
// sooner). Pending reads older samples back out of the lock: only its
// caller waits for the disk, and Track's read of the file the same. Close
// and Remove wait for the disk; CloseContext and RemoveContext until their
// context ends, then report what the disk did not take (Stats.Stalled).
// Samples and attempts returned are the caller's. Close (or Remove) once,
// at the end.
package spool
