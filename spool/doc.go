// Package spool is bridge's durable queue: every sample is appended to a
// JSON Lines file before any tracker sees it, and each tracker's
// acknowledgements are appended as they come. What a tracker has not
// acknowledged survives an outage and a crash or kill of bridge; a
// restarted bridge or `bridge sync` sends it later. This is the spool's
// contract, written once; docs/reliability.md says what it means for a
// user.
//
// # Records
//
// One JSON object a line, each ending with a newline, told apart by
// "type":
//
//	{"type":"start","time":ms,"attempt":N,"pid":P,"version":"..","runs":{"mlflow":"<run id>"},"info":{..}}
//	{"type":"sample","seq":N,"ts":ms,"metrics":{"container_...":1.5,...}}
//	{"type":"ack","sink":"mlflow","run":"<run id>","seq":N}   all samples <= N acknowledged
//	{"type":"run","time":ms,"sink":"mlflow","run":"<run id>","attempt":N,"info":{..}}
//	    the run of attempt N (no attempt: the last one) found after its
//	    start record; merged into that start record when read
//	{"type":"end","time":ms,"exit_code":N,"info":{..},"metrics":{..}}
//	    a clean shutdown: the end the trackers were told (its tags and
//	    status in info, the job's figures in metrics)
//
// Each start record begins an attempt (a run of bridge on the file); the
// samples after it are that attempt's, and one without an end record
// stopped without a clean shutdown. Seqs increase across attempts (NextSeq
// is after the highest in the file); the highest ack of each sink and run
// counts. Info is the caller's: bridge's tags (where each run is, whether
// bridge created it, a multi-node job's key and node, the run's name, the
// job's start time and provenance, "mode":"sync" for `bridge sync`'s own
// attempt). Non-finite values are written as the
// strings "NaN", "Infinity", "-Infinity".
//
// # One writer
//
// A spool has one writer at a time: OpenWithin takes an exclusive lock on the
// file (flock, which the kernel releases when the holder dies, kill -9
// included) and fails with ErrLocked while another live process holds it.
// NewMemory is the spool of a job that could not open its file: samples
// wait in memory for the trackers, and nothing is kept. The file is
// private: created 0600, and a directory OpenWithin creates for it 0700 (an
// existing file keeps its mode).
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
// every D; while a sink has given up (Untrack), its samples count as held
// by no tracker. What is written and not yet fsynced is kept in memory too,
// at most 1 MiB (past it the fsync comes at once): when an fsync fails,
// those bytes are written again before the next one. Close and the size
// cap's rewrite fsync first; D = 0 fsyncs every write.
//
// # Reading and repair
//
// OpenWithin reads every line that ends with a newline. A record is a JSON
// object with a type and, for a sample or an ack, a seq; any other
// complete line (garbage, a wrong type, longer than MaxLine) is skipped
// and counted (Stats.BadLines, the first line numbers in BadLineNums),
// blank lines and unknown types are ignored (newer files stay readable),
// and a value that is not a number is left out of its sample alone and
// counted (Stats.BadValues). An unterminated last line (a crash or a full
// disk mid-write) is kept when it is a whole record that lacks only its
// newline (the newline is added), and cut off otherwise (Stats.TornTail).
// Repairing is idempotent: a repaired file reopens with no torn tail, the
// same samples and the same count of skipped lines. A write that fails
// part-way is cut back to the last whole record at once, so a spool in
// use never leaves a torn line.
//
// # Failures and bounds
//
// A file that cannot be written (disk full, EIO, a failing fsync) costs
// durability, never samples: records wait in order in a buffer bounded in
// samples and bytes (Options.MaxBuffered, MaxBufferedBytes; past either,
// the oldest samples are dropped and counted, Stats.LostUnwritten), and
// only the newest ack of each sink and run waits. Every later record
// retries at most once a second (30 s after a failed size-cap rewrite),
// Close once more; a retry that succeeds writes the buffer in order, in
// writes of at most 1 MiB. Only the newest unacknowledged samples are kept
// in memory, within Options.MemSamples and MemBytes; older ones are read
// back from the file, at most 8 MiB a Pending. Bytes are what a sample
// holds in memory (metrics.Sample.MemBytes: its points and names, a little
// over), so that no sample shape multiplies a window past its bound. No
// record is written that a reader would skip: a sample keeps at most
// MaxPoints points, names of at most MaxKey bytes, and fits MaxLine
// (passed-through scrape series are left out first, then the sample's last
// points); the excess is counted (Stats.PointsLeftOut) and said once. A
// start, run or end record too long for MaxLine loses its longest Info
// values until it fits.
//
// # Size cap
//
// Options.MaxSize caps the file (the zero value is no cap). When a write
// would take the file past it, the file is rewritten within half of it (so
// that it is not rewritten at every sample): every start, run and end
// record, one ack per sink and run, and the samples that fit, first the
// newest not yet delivered to every run of their attempt, then the newest
// delivered ones. The new file is locked, then takes the old one's place
// by rename, so a crash leaves one or the other. Rewrites and the
// undelivered samples they dropped are counted (Stats.Compactions,
// DroppedByCap); the first rewrite that dropped only delivered samples and
// the first that dropped undelivered ones are each said at WARN.
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
