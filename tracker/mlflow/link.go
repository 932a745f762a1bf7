package mlflow

import (
	"net/url"
	"strings"

	"github.com/bridge-dev/bridge/tracker"
)

var _ tracker.Linker = (*Sink)(nil)

// Link implements tracker.Linker: the two lines MLflow's client prints
// when a run ends (MlflowClient._log_url, MLflow 3.x), from the tracking
// URI without its credentials: the run's page and its experiment's.
func (s *Sink) Link() ([]string, bool) {
	s.expMu.Lock()
	exp, name := s.expID, s.linkName
	s.expMu.Unlock()
	if s.runID == "" || exp == "" {
		return nil, false
	}
	host, ok := linkHost(s.cfg.TrackingURI)
	if !ok {
		return nil, false
	}
	if name == "" {
		name = s.runID
	}
	experiment := host + "/#/experiments/" + url.PathEscape(exp)
	return []string{
		"🏃 View run " + name + " at: " + experiment + "/runs/" + url.PathEscape(s.runID),
		"🧪 View experiment at: " + experiment,
	}, true
}

// linkHost is the tracking URI as a page's address: an http(s) URL
// without its user and password, its query or fragment, and a trailing
// slash.
func linkHost(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false
	}
	u.User, u.RawQuery, u.Fragment, u.RawFragment = nil, "", "", ""
	return strings.TrimRight(u.String(), "/"), true
}
