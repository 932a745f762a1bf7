package mlflow

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/internal/kfile"
	"github.com/bridge-dev/bridge/redact"
	"github.com/bridge-dev/bridge/tracker"
)

const apiPrefix = "/api/2.0/mlflow/"

// APIError is an answer of the MLflow server other than 2xx. Its text names
// the server (password redacted), what bridge was doing, and MLflow's
// error_code and message; it never contains a credential.
type APIError struct {
	URL     string // tracking URI, redacted
	Op      string // what bridge was doing, e.g. "posting metrics to run 3f2a..."
	Status  int    // HTTP status
	Code    string // MLflow error_code (RESOURCE_DOES_NOT_EXIST, ...); empty if the body was not MLflow's JSON
	Message string // MLflow's message, or the start of the body
	Hint    string // what the user can do, when bridge knows
}

func (e *APIError) Error() string {
	status := strconv.Itoa(e.Status)
	if e.Code != "" {
		status += " " + e.Code
	}
	var b strings.Builder
	switch e.Status {
	case http.StatusUnauthorized:
		fmt.Fprintf(&b, "MLflow rejected the credentials (%s) at %s while %s", status, e.URL, e.Op)
	case http.StatusForbidden:
		fmt.Fprintf(&b, "MLflow denied permission (%s) at %s while %s", status, e.URL, e.Op)
	default:
		fmt.Fprintf(&b, "MLflow at %s answered %s while %s", e.URL, status, e.Op)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "; %s", e.Hint)
	}
	return b.String()
}

// mlflowError is the JSON body of MLflow's errors (mlflow/exceptions.py).
type mlflowError struct {
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
}

// newClient builds the resty client: one attempt per request (retries belong
// to the forwarder and to tracker.Request), auth and TLS as the Python client sets them up.
func newClient(cfg Config, log *slog.Logger) (*resty.Client, error) {
	c := resty.New().
		SetBaseURL(cfg.TrackingURI).
		SetTimeout(cfg.Timeout).
		SetRetryCount(0).
		SetResponseBodyLimit(tracker.MaxResponseBytes).
		SetLogger(tracker.DebugLogger{Log: log}).
		SetHeader("User-Agent", "bridge (mlflow sink)")
	// Basic wins over Bearer when both are set, as in rest_utils.http_request.
	switch {
	case cfg.Username != "" && cfg.Password != "":
		c.SetBasicAuth(cfg.Username, cfg.Password)
		// resty warns about Basic over plain http on every request; the user
		// chose the server, bridge does not repeat that warning per request.
		c.SetDisableWarn(true)
	case cfg.Token != "":
		c.SetAuthToken(cfg.Token)
		c.SetDisableWarn(true)
	}

	if strings.HasPrefix(cfg.TrackingURI, "https:") {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		c.SetTLSClientConfig(tc)
	}
	return c, nil
}

// Bounds on the files the MLflow variables name (internal/kfile): a CA
// bundle of the whole web PKI is about 220 KB, a certificate with its key a
// few KB.
const (
	maxCABundle       = 16 << 20
	maxCredentialFile = 1 << 20
)

func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureTLS} //nolint:gosec // the user asked for it with MLFLOW_TRACKING_INSECURE_TLS
	if cfg.ServerCertPath != "" {
		// requests' verify=<path> trusts that bundle only, not the system roots.
		pem, err := kfile.ReadUserFile(cfg.ServerCertPath, maxCABundle)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvServerCertPath, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate found", EnvServerCertPath, cfg.ServerCertPath)
		}
		tc.RootCAs = pool
	}
	if cfg.ClientCertPath != "" {
		// requests' cert=<path>: one PEM file with the certificate and its key.
		pem, err := kfile.ReadUserFile(cfg.ClientCertPath, maxCredentialFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvClientCertPath, err)
		}
		cert, err := tls.X509KeyPair(pem, pem)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: want one PEM file with the certificate and its private key: %w", EnvClientCertPath, cfg.ClientCertPath, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// call makes a request to endpoint (e.g. "runs/log-batch") through
// exchange. body, when not nil, is sent as JSON (a []byte is sent as is);
// out, when not nil, receives the decoded answer. Errors are classified
// for the forwarder: see classify.
func (s *Sink) call(ctx context.Context, method, endpoint string, query map[string]string, body, out any, op string) error {
	var raw []byte
	if body != nil {
		var ok bool
		if raw, ok = body.([]byte); !ok {
			var err error
			if raw, err = json.Marshal(body); err != nil {
				return fmt.Errorf("%s: encoding request: %w", op, err)
			}
		}
	}
	resp, err := s.exchange(ctx, op, method, apiPrefix+endpoint, true, func(req *resty.Request) {
		if query != nil {
			req.SetQueryParams(query)
		}
		if raw != nil {
			// MLflow answers 400 to a POST without this content type.
			req.SetHeader("Content-Type", "application/json").SetBody(raw)
		}
	})
	if err != nil || out == nil {
		return err
	}
	if err := decode(resp.Body(), out); err != nil {
		return tracker.Permanent(fmt.Errorf("%s: MLflow at %s sent an answer bridge cannot read (is %s an `mlflow server`?): %w",
			op, s.url, EnvTrackingURI, err))
	}
	return nil
}

// exchange is the one way a request reaches MLflow: through
// tracker.Request, which tries it once under a caller that retries (the
// forwarder's Send, the start) and retries it by the write policy
// otherwise (the end of the run). prepare sets the request's query, headers
// and body, again for each try. With wantJSON a 2xx must be one JSON
// object, as every REST endpoint answers ({} for log-batch): a 200 HTML
// page from a login proxy is not a delivery.
func (s *Sink) exchange(ctx context.Context, op, method, path string, wantJSON bool, prepare func(*resty.Request)) (*resty.Response, error) {
	var resp *resty.Response
	err := tracker.Request(ctx, func(ctx context.Context) error {
		req := s.client.R().SetContext(ctx)
		prepare(req)
		r, err := req.Execute(method, path)
		if r != nil && r.RawResponse != nil {
			s.Answered() // whatever it said: the server is there
		}
		if err := s.classify(op, r, err); err != nil {
			return err
		}
		if wantJSON {
			if err := tracker.CheckJSONObject(r.Body(), fmt.Sprintf("%s: MLflow at %s", op, s.url)); err != nil {
				return err
			}
		}
		resp = r
		return nil
	})
	return resp, err
}

// decode reads an MLflow answer into out; a fuzz target calls it with any
// bytes.
func decode(body []byte, out any) error { return json.Unmarshal(body, out) }

// classify turns one HTTP exchange into what the forwarder acts on, by
// tracker.Classify (the policy every sink shares): connection errors and a
// body over tracker.MaxResponseBytes are retried, the status decides the
// rest. Its errors are *APIError with MLflow's error_code and message.
func (s *Sink) classify(op string, resp *resty.Response, err error) error {
	if err != nil {
		// http.Client's errors carry the request URL; it strips only a
		// password, not a token in the query.
		err = redact.URLError(err)
		if tracker.TLSUntrusted(err) {
			return tracker.Permanent(fmt.Errorf("%s: MLflow at %s: %s: %w", op, s.url, s.trustHint(), err))
		}
		return fmt.Errorf("%s: MLflow at %s unreachable: %w", op, s.url, err)
	}
	code := resp.StatusCode()
	if code >= 200 && code < 300 {
		return nil
	}
	apiErr := &APIError{URL: s.url, Op: op, Status: code}
	var me mlflowError
	if decode(resp.Body(), &me) == nil && (me.ErrorCode != "" || me.Message != "") {
		apiErr.Code, apiErr.Message = tracker.Shorten(me.ErrorCode), tracker.Shorten(me.Message)
	} else {
		apiErr.Message = tracker.Shorten(string(resp.Body()))
	}
	if code == http.StatusBadRequest && serverDBError(me) {
		// The server's trouble, not the request's: retried with backoff.
		apiErr.Hint = "a database error on the MLflow server (under load, its connection pool: a log-batch holds two connections at once, so give each server worker more than its 40 threads, MLFLOW_SQLALCHEMYSTORE_POOL_SIZE + MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW >= 41; see \"Sizing an MLflow server for many bridges\" in bridge's docs/mlflow.md); retried"
		return apiErr
	}
	switch {
	case code == http.StatusUnauthorized:
		apiErr.Hint = s.credentialHint()
	case code == http.StatusNotFound && (apiErr.Code == "" || apiErr.Code == "ENDPOINT_NOT_FOUND"):
		apiErr.Hint = fmt.Sprintf("no MLflow REST API under %s: check %s (the address of `mlflow server`, with its path prefix if any)", s.url, EnvTrackingURI)
	}
	return tracker.Classify(code, resp.Header().Get("Retry-After"), time.Now(), apiErr)
}

// trustHint says what to set when the server's certificate is not trusted.
func (s *Sink) trustHint() string {
	const what = "its TLS certificate is not trusted, a configuration error (not retried)"
	if s.cfg.ServerCertPath != "" {
		return fmt.Sprintf("%s: %s=%s does not hold the CA that signed it (or set %s=true to skip verification)",
			what, EnvServerCertPath, s.cfg.ServerCertPath, EnvInsecureTLS)
	}
	return fmt.Sprintf("%s: set %s to the CA bundle that signed it, or %s=true to skip verification",
		what, EnvServerCertPath, EnvInsecureTLS)
}

func (s *Sink) credentialHint() string {
	switch {
	case s.cfg.Username != "" && s.cfg.Password != "":
		return fmt.Sprintf("check %s / %s (or ~/.mlflow/credentials)", EnvUsername, EnvPassword)
	case s.cfg.Token != "":
		return fmt.Sprintf("check %s", EnvToken)
	}
	return fmt.Sprintf("no credentials are set: set %s, or %s and %s", EnvToken, EnvUsername, EnvPassword)
}

// isCode reports whether err is an MLflow answer with the given error_code.
func isCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// serverDBError reports an MLflow answer that blames its own database:
// MLflow's SQL store turns any SQLAlchemy error other than OperationalError
// (a pool timeout under load, "QueuePool limit of size 5 overflow 10
// reached") into 400 BAD_REQUEST (mlflow/store/db/utils.py), which would
// otherwise read as a request that can never succeed. SQLAlchemy ends its
// messages with a link to its error docs.
func serverDBError(me mlflowError) bool {
	return me.ErrorCode == "BAD_REQUEST" &&
		(strings.Contains(me.Message, "sqlalche.me/e/") || strings.Contains(me.Message, "sqlalchemy") || strings.Contains(me.Message, "QueuePool limit"))
}
