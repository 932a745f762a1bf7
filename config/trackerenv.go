package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/bridge-dev/bridge/redact"
)

// checkTrackerEnv rejects trackers' own variables that are malformed rather
// than merely pointing elsewhere: a non-HTTP MLflow store is a valid choice
// (bridge falls back to its spool), http:// without a host is a typo.
func checkTrackerEnv(getenv func(string) string) error {
	if uri := strings.TrimSpace(getenv("MLFLOW_TRACKING_URI")); uri != "" {
		scheme, _, _ := strings.Cut(strings.ToLower(uri), ":")
		if scheme == "http" || scheme == "https" {
			u, err := url.Parse(uri)
			if err != nil || u.Host == "" || u.Hostname() == "" {
				return fmt.Errorf("%w: MLFLOW_TRACKING_URI=%q: not a valid http(s) URL with a host (e.g. http://mlflow:5000)", ErrUsage, redact.URI(uri))
			}
		}
	}
	if id := strings.TrimSpace(getenv("MLFLOW_SYSTEM_METRICS_NODE_ID")); id != "" && !ValidNodeID(id) {
		return fmt.Errorf("%w: MLFLOW_SYSTEM_METRICS_NODE_ID=%q: %s", ErrUsage, id, nodeIDRule)
	}
	return nil
}
