// Package mlflow is bridge's MLflow sink: it finds or creates the run, posts
// samples as system/* metrics through the REST API of an `mlflow server`, and
// sets the run's terminal status when bridge created the run.
//
// Configuration comes from MLflow's own environment variables, read the way
// the Python client reads them (mlflow/environment_variables.py,
// mlflow/utils/credentials.py, mlflow/utils/rest_utils.py), so that a job that
// already talks to MLflow needs no new settings.
package mlflow

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/internal/printable"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/tracker"
)

// MLflow's environment variables: ConfigFromEnv reads them, but for
// EnvNodeID, which bridge reads for every tracker that names the node
// (tracker.Registration.NodeIDEnv).
const (
	EnvTrackingURI    = "MLFLOW_TRACKING_URI"
	EnvToken          = "MLFLOW_TRACKING_TOKEN"
	EnvUsername       = "MLFLOW_TRACKING_USERNAME"
	EnvPassword       = "MLFLOW_TRACKING_PASSWORD"
	EnvInsecureTLS    = "MLFLOW_TRACKING_INSECURE_TLS"
	EnvServerCertPath = "MLFLOW_TRACKING_SERVER_CERT_PATH"
	EnvClientCertPath = "MLFLOW_TRACKING_CLIENT_CERT_PATH"
	EnvRunID          = "MLFLOW_RUN_ID"
	EnvExperimentName = "MLFLOW_EXPERIMENT_NAME"
	EnvExperimentID   = "MLFLOW_EXPERIMENT_ID"
	EnvRequestTimeout = "MLFLOW_HTTP_REQUEST_TIMEOUT"
	EnvNodeID         = "MLFLOW_SYSTEM_METRICS_NODE_ID"
)

// DefaultTimeout is MLflow's default MLFLOW_HTTP_REQUEST_TIMEOUT.
const DefaultTimeout = 120 * time.Second

// ErrNotHTTP is returned by ConfigFromEnv when the tracking URI names no
// `mlflow server` (unset, sqlite:, file:, a path, databricks, http://
// without a host): bridge posts over REST, so the MLflow sink is off for
// the job and its samples stay in the spool.
var ErrNotHTTP = errors.New("bridge posts to MLflow over REST and needs the http(s) URL of an `mlflow server`")

// Config is everything the sink needs to reach one MLflow server and run.
type Config struct {
	TrackingURI string // http(s) URL of `mlflow server`, without a trailing slash

	// Token is sent as Bearer auth, but only when Username/Password are not
	// both set: the Python client prefers Basic (rest_utils.http_request).
	Token              string
	Username, Password string

	InsecureTLS    bool   // skip TLS verification (MLFLOW_TRACKING_INSECURE_TLS)
	ServerCertPath string // CA bundle used instead of the system roots
	ClientCertPath string // PEM file holding the client certificate and its key

	RunID string // attach to this run instead of creating one
	// OwnsRun says that bridge created RunID itself in an earlier attempt of
	// the same job (recorded in the spool): it then sets its terminal status
	// as for a run it creates now.
	OwnsRun        bool
	ExperimentName string // experiment to create the run in (created if missing)
	ExperimentID   string // experiment id to create the run in
	RunName        string // overrides StartInfo.RunName when set

	// NodeID puts keys under system/<node_id>/, MLflow's multi-node
	// convention; StartInfo.NodeID, when set, wins. bridge gives it
	// (tracker.Build.NodeID: --node-id, else MLFLOW_SYSTEM_METRICS_NODE_ID
	// cleaned into one key segment).
	NodeID string

	Timeout time.Duration // per request; DefaultTimeout when zero

	// Job, when set (and RunID is not), makes the sink one of the bridges
	// of a multi-node job: every node's sink elects the same run for the
	// job's key, with no coordinator and MLflow's REST API only (elect.go;
	// docs/multinode.md, "Finding the one run"), and records this node's
	// end on it (jobend.go). Its Node and Primary are not read.
	Job *tracker.Job
	// JobRun is the job's run when it is already known (`bridge sync`: the
	// run the spool recorded): joined without an election, unless it is
	// gone.
	JobRun string

	// Follow (`bridge attach`) follows the status of the run RunID names,
	// as MLflow's own monitor does: before each post the sink reads it, and
	// once its owner has ended it (mlflow.end_run()) nothing more is written
	// into it: samples taken after its end are left out (Send reports
	// tracker.ErrRunEnded), and Finish records no tags.
	Follow bool
}

// ConfigFromEnv reads MLflow's environment variables. getenv is os.Getenv in
// production; home is the user's home directory, where
// ~/.mlflow/credentials is looked up ([mlflow] section,
// mlflow_tracking_username / mlflow_tracking_password; the environment wins,
// variable by variable, as in the Python client).
//
// These are MLflow's variables, not bridge's: none of them stops the job.
// A value bridge can do without is left out (the default is used) and
// ignored says so, one line each, naming the variable. A value without
// which bridge cannot post to MLflow is the error, worded with what to do:
// the MLflow sink is then off for the job. A tracking URI that is not an
// `mlflow server`'s wraps ErrNotHTTP; the rest of the Config is still
// filled in (RunID, names), so the caller can record them in the spool.
func ConfigFromEnv(getenv func(string) string, home string) (cfg Config, ignored []string, err error) {
	cfg = Config{
		TrackingURI:    strings.TrimRight(strings.TrimSpace(getenv(EnvTrackingURI)), "/"),
		Token:          getenv(EnvToken),
		Username:       getenv(EnvUsername),
		Password:       getenv(EnvPassword),
		ServerCertPath: getenv(EnvServerCertPath),
		ClientCertPath: getenv(EnvClientCertPath),
		RunID:          strings.TrimSpace(getenv(EnvRunID)),
		ExperimentName: getenv(EnvExperimentName),
		ExperimentID:   strings.TrimSpace(getenv(EnvExperimentID)),
		Timeout:        DefaultTimeout,
	}
	if cfg.Username == "" || cfg.Password == "" {
		path := credentialsPath(home)
		user, pass, err := readCredentialsFile(path)
		if err != nil {
			ignored = append(ignored, fmt.Sprintf("%v: not used (no user name or password from it)", err))
		}
		if cfg.Username == "" {
			cfg.Username = user
		}
		if cfg.Password == "" {
			cfg.Password = pass
		}
	}

	if v := getenv(EnvInsecureTLS); v != "" {
		b, err := parseBool(v)
		if err != nil {
			ignored = append(ignored, fmt.Sprintf("%s=%s: %v: not used, TLS certificates are verified", EnvInsecureTLS, printable.Quote(v), err))
		}
		cfg.InsecureTLS = b
	}
	if v := strings.TrimSpace(getenv(EnvRequestTimeout)); v != "" {
		// MLflow parses it as int seconds.
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			ignored = append(ignored, fmt.Sprintf("%s=%s is not a positive whole number of seconds: not used, requests time out after %s", EnvRequestTimeout, printable.Quote(v), DefaultTimeout))
		} else {
			cfg.Timeout = time.Duration(n) * time.Second
		}
	}
	return cfg, ignored, cfg.validate()
}

// validate checks what New relies on; ConfigFromEnv and New both call it.
func (c Config) validate() error {
	if err := checkHTTP(c.TrackingURI); err != nil {
		return err
	}
	if c.InsecureTLS && c.ServerCertPath != "" {
		return fmt.Errorf("%s and %s are both set (MLflow's client refuses that too): unset one of them (skip verification, or verify with the given CA bundle)", EnvInsecureTLS, EnvServerCertPath)
	}
	if c.NodeID != "" && !validNodeID(c.NodeID) {
		return fmt.Errorf("node id %q: %s", c.NodeID, nodeIDRule)
	}
	if (c.Username == "" || c.Password == "") && strings.ContainsFunc(c.Token, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		// Sent as it is in a header (Basic auth is base64): Go's client,
		// as Python's requests, refuses every request with it.
		return fmt.Errorf("%s holds a control character (a newline?), which an HTTP header cannot carry (MLflow's client fails on it too): set it without one", EnvToken)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("MLflow request timeout %s is negative", c.Timeout)
	}
	return nil
}

// Configured reports whether the job names an MLflow store at all
// (MLFLOW_TRACKING_URI): under --trackers=auto only then is MLflow on (a
// store bridge cannot post to is then explained, and the samples spooled).
func Configured(getenv func(string) string) bool {
	return getenv(EnvTrackingURI) != ""
}

// checkHTTP returns an error wrapping ErrNotHTTP unless uri is an http(s)
// URL with a host, worded with what to do about it. No URI is shown with
// its password.
func checkHTTP(uri string) error {
	if uri == "" {
		return fmt.Errorf("%s is not set: %w: set it, e.g. %s=http://127.0.0.1:5000", EnvTrackingURI, ErrNotHTTP, EnvTrackingURI)
	}
	shown := redact.URI(uri)
	quoted := printable.Quote(shown)
	scheme, _, _ := strings.Cut(strings.ToLower(uri), ":")
	u, err := url.Parse(uri)
	switch {
	case scheme == "http" || scheme == "https":
		if err != nil || u.Host == "" || u.Hostname() == "" {
			return fmt.Errorf("%s=%s is not a valid http(s) URL with a host: %w: set it to one, e.g. http://mlflow:5000", EnvTrackingURI, quoted, ErrNotHTTP)
		}
		return nil
	case scheme == "databricks":
		return fmt.Errorf("%s=%s is reached only through MLflow's Python client: %w", EnvTrackingURI, quoted, ErrNotHTTP)
	}
	// sqlite:, file:, a path, a database URL: a store `mlflow server`
	// can serve.
	store := shown
	if len(store) > 200 || strings.ContainsAny(store, " '\"$`\\") || strings.Contains(store, redact.Mask) {
		store = `"$` + EnvTrackingURI + `"`
	}
	return fmt.Errorf("%s=%s is a store only MLflow's Python client opens: %w: serve it with `mlflow server --backend-store-uri %s` and set %s=http://127.0.0.1:5000",
		EnvTrackingURI, quoted, ErrNotHTTP, store, EnvTrackingURI)
}

// parseBool accepts what MLflow's _BooleanEnvironmentVariable accepts.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, errors.New(`want one of "true", "false", "1", "0"`)
}

func credentialsPath(home string) string {
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".mlflow", "credentials")
}

// readCredentialsFile reads the [mlflow] section of ~/.mlflow/credentials. A
// missing file is no credentials, not an error.
func readCredentialsFile(path string) (user, pass string, err error) {
	if path == "" {
		return "", "", nil
	}
	raw, err := kfile.ReadUserFile(path, maxCredentialFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading MLflow credentials: %w", err)
	}
	kv, err := parseCredentials(bytes.NewReader(raw))
	if err != nil {
		return "", "", fmt.Errorf("reading MLflow credentials %s: %w", path, err)
	}
	return kv["mlflow_tracking_username"], kv["mlflow_tracking_password"], nil
}

// parseCredentials returns the keys of the [mlflow] section of an INI file,
// lowercased as Python's configparser does. Only what MLflow's file uses is
// supported: sections, "key = value" / "key: value", # and ; comments.
func parseCredentials(r io.Reader) (map[string]string, error) {
	kv := map[string]string{}
	section := ""
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated section header %q", n, line)
			}
			section = strings.TrimSpace(line[1:end])
			continue
		}
		i := strings.IndexAny(line, "=:")
		if i < 0 {
			return nil, fmt.Errorf("line %d: want key = value", n)
		}
		if section == "mlflow" {
			kv[strings.ToLower(strings.TrimSpace(line[:i]))] = strings.TrimSpace(line[i+1:])
		}
	}
	return kv, sc.Err()
}
