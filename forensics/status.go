package forensics

import "github.com/bridge-dev/bridge/tracker"

// Status is the run status a verdict calls for (MLflow's names): FINISHED
// for success; FAILED when the job failed, whatever ended it: an OOM kill
// (the kernel's SIGKILL ended it, but the job's memory did), a GPU error,
// an application error, or a crash signal the process raised itself
// (SIGSEGV, SIGABRT, ...); KILLED when it was stopped from outside (a
// forwarded SIGTERM, kill -9, a kill after a health check) or by a signal
// nobody can place.
func (v Verdict) Status(e Evidence) string {
	switch v.Reason {
	case ReasonSuccess:
		return tracker.StatusFinished
	case ReasonCgroupOOMKill, ReasonNodeOOMKill, ReasonGPUError, ReasonAppError:
		return tracker.StatusFailed
	case ReasonKilledBySignal:
		if sig, _ := effectiveSignal(e); crash[sig] && v.Evidence["forwarded"] != "true" {
			return tracker.StatusFailed
		}
	}
	return tracker.StatusKilled
}
