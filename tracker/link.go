package tracker

// Linker is a sink that can say where a person sees its run: the lines
// the tracker's own client prints at a run's end (MLflow's "🏃 View run
// <name> at: <url>"), which open the end-of-run table. Link makes no
// request and reads no file; ok is false while the sink has no run. It is
// called once the sink's forwarder has returned.
type Linker interface {
	Link() (lines []string, ok bool)
}
