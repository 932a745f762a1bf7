// Package ok sends its requests inside tracker.Request, and marks the
// context of a Send (which a forwarder retries) OneAttempt, which the test
// allowlists.
package ok

import (
	"context"
	"net/http"

	"github.com/go-resty/resty/v2"

	"github.com/bridge-dev/bridge/tracker"
)

type sink struct{ c *resty.Client }

func (s *sink) exchange(ctx context.Context, path string, body []byte) error {
	return tracker.Request(ctx, func(ctx context.Context) error {
		_, err := s.c.R().SetContext(ctx).SetBody(body).Execute(http.MethodPost, path)
		return err
	})
}

func (s *sink) Send(ctx context.Context) error {
	return s.exchange(tracker.OneAttempt(ctx), "/api/2.0/mlflow/runs/log-batch", nil)
}

func (s *sink) Finish(ctx context.Context) error {
	return s.exchange(ctx, "/api/2.0/mlflow/runs/update", nil)
}
