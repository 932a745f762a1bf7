// Package bad sends requests to a tracker around tracker.Request in every
// way the writes rule knows; each function is one way.
package bad

import (
	"context"
	"net/http"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/tracker"
)

// postOnce is a write sent once: the end of a run left RUNNING by one 503.
func postOnce(c *resty.Client) error {
	_, err := c.R().SetBody(`{"status":"FINISHED"}`).Post("/api/2.0/mlflow/runs/update")
	return err
}

func putOnce(req *resty.Request) error {
	_, err := req.Put("/api/2.0/mlflow-artifacts/artifacts/x")
	return err
}

// requestEscapes builds the request inside the attempt and sends it after.
func requestEscapes(ctx context.Context, c *resty.Client) error {
	var req *resty.Request
	_ = tracker.Request(ctx, func(ctx context.Context) error { req = c.R().SetContext(ctx); return nil })
	_, err := req.Execute(http.MethodPost, "/graphql")
	return err
}

// nestedNotAttempt: a function literal that is not the attempt.
func nestedNotAttempt(c *resty.Client) func() error {
	return func() error { _, err := c.R().Get("/"); return err }
}

func plainHTTP(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func httpGet() error {
	resp, err := http.Get("http://127.0.0.1:5000/health")
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// oneAttempt turns the write policy off for a call nothing retries.
func oneAttempt(ctx context.Context, c *resty.Client) error {
	return tracker.Request(tracker.OneAttempt(ctx), func(ctx context.Context) error {
		_, err := c.R().SetContext(ctx).Post("/api/2.0/mlflow/runs/update")
		return err
	})
}
