package upload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/pipeline"
	"github.com/bridge-dev/bridge/spool"
)

// Sync is all of `bridge sync o.Path` within ctx, sync's --timeout
// (timeout, for what it says), which bounds the file's stat and open too:
// a disk that does not answer (a hung network mount) is given up on. It
// opens the file, uploads it to the trackers o.Config turns on (Run; it
// sets o.Spool and o.Trackers) and closes it, and returns sync's exit
// code. A non-nil error is the user's to fix (exit 2), returned before
// anything was sent or created: a missing file (neither the file nor a
// run is created for it), one that is no regular file or no spool, no
// tracker on.
func Sync(ctx context.Context, timeout time.Duration, o Options) (code int, err error) {
	st, err := kfile.Stat(ctx, o.Path)
	if errors.Is(err, kfile.ErrNoAnswer) {
		fmt.Fprintf(o.Stderr, "bridge: sync: spool file %q: its disk did not answer within --timeout=%s; nothing was sent\n", o.Path, timeout)
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sync: spool file %q: %w", o.Path, err)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("sync: spool file %q: not a regular file", o.Path)
	}
	sp, err := pipeline.OpenSpool(ctx, o.Path, pipeline.ForSync, o.Config, o.Log)
	switch {
	case errors.Is(err, spool.ErrStalled) || ctx.Err() != nil:
		fmt.Fprintf(o.Stderr, "bridge: sync: %v; nothing was sent\n", err)
		return 1, nil
	case errors.Is(err, spool.ErrLocked):
		// Sending what a live bridge is sending would make two runs of it,
		// or the same samples twice.
		fmt.Fprintf(o.Stderr, "bridge: sync: %s is being written by a running bridge (one writer per spool); run bridge sync once it has exited\n", o.Path)
		return 1, nil
	case err != nil:
		return 0, err
	}
	defer func() {
		// What sync recorded (acknowledgements, its end) gets the time left,
		// and at least a second, however long the upload took; a disk that
		// has not taken it by then is not waited for.
		deadline, _ := ctx.Deadline()
		cctx, cancel := context.WithDeadline(context.Background(), latest(deadline, time.Now().Add(time.Second)))
		defer cancel()
		if err := sp.CloseContext(cctx); err != nil {
			fmt.Fprintf(o.Stderr, "bridge: sync: %v\n", err)
		}
	}()
	on, off := pipeline.Trackers().BuildSinks(o.Config, pipeline.Overrides{}, nil, o.Log) // a tracker off is said in the log
	if len(on) == 0 {
		return 0, errors.New("sync needs a tracker: " + pipeline.Trackers().NoTracker(off))
	}
	o.Spool, o.Trackers = sp, nil
	for _, s := range on {
		o.Trackers = append(o.Trackers, s.Name())
	}
	return Run(ctx, o), nil
}

// latest is the later of two times.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
