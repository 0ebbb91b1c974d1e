// Package httpapi is the sidecar's HTTP API for the Nextcloud app. Every route except
// /v1/health requires a v1 signature (docs/app-sidecar-protocol.md); handlers return
// errors and one writer maps them to a status, a stable code and a safe message.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/istota/istota/sidecar/internal/intake"
	"github.com/istota/istota/sidecar/internal/portal"
	"github.com/istota/istota/sidecar/internal/signing"
)

// Events is the Talk intake.
type Events interface {
	Handle(ctx context.Context, p intake.Payload) (intake.Answer, error)
}

// Options configures the API.
type Options struct {
	Secret       []byte
	MaxBodyBytes int64
	Version      string
	Schema       int
	Clock        func() time.Time
	Logger       *slog.Logger
	// Portal answers the settings pages' endpoints (docs/user-api.md); nil leaves
	// them out.
	Portal *portal.Service
	// Live is the WebSocket of live task progress (GET /v1/ws); it checks its own
	// token instead of a request signature, because the browser connects to it.
	Live http.Handler
}

// API is the http.Handler for the app.
type API struct {
	mux    *http.ServeMux
	events Events
	nonces *signing.Nonces
	opts   Options
}

// New builds the API.
func New(events Events, nonces *signing.Nonces, opts Options) *API {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	a := &API{mux: http.NewServeMux(), events: events, nonces: nonces, opts: opts}
	a.mux.HandleFunc("GET /v1/health", a.handle(a.health))
	a.mux.HandleFunc("POST /v1/ping", a.signed(a.ping))
	a.mux.HandleFunc("POST /v1/talk/events", a.signed(a.talkEvent))
	a.routePortal()
	if opts.Live != nil {
		a.mux.Handle("GET /v1/ws", opts.Live)
	}
	return a
}

// ServeHTTP implements http.Handler. Requests no route matches get the mux's own 404 or
// 405 status, with the API's JSON error body instead of its plain-text one.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := a.mux.Handler(r)
	if pattern != "" {
		a.mux.ServeHTTP(w, r) // the mux sets the path values
		return
	}
	h.ServeHTTP(&jsonStatusWriter{ResponseWriter: w}, r)
}

// jsonStatusWriter replaces the body of the mux's fallback answers with a JSON error.
type jsonStatusWriter struct {
	http.ResponseWriter
	wrote bool
}

func (j *jsonStatusWriter) WriteHeader(status int) {
	if j.wrote {
		return
	}
	j.wrote = true
	code, msg := "not_found", "no such endpoint"
	if status == http.StatusMethodNotAllowed {
		code, msg = "method_not_allowed", "this endpoint does not accept that method"
	}
	writeJSON(j.ResponseWriter, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (j *jsonStatusWriter) Write(b []byte) (int, error) {
	if !j.wrote {
		j.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}

// Error is an error with an HTTP status and a stable code safe to show the caller.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

type handlerFunc func(w http.ResponseWriter, r *http.Request, body []byte) error

// handle reads the body within the size limit and maps returned errors.
func (a *API) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				a.writeError(w, r, &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
					Message: fmt.Sprintf("request body exceeds %d bytes", a.opts.MaxBodyBytes)})
				return
			}
			a.writeError(w, r, &Error{Status: http.StatusBadRequest, Code: "bad_body", Message: "could not read the request body"})
			return
		}
		if err := h(w, r, body); err != nil {
			a.writeError(w, r, err)
		}
	}
}

// signed verifies the signature and the nonce before the handler sees the request.
func (a *API) signed(h handlerFunc) http.HandlerFunc {
	return a.handle(func(w http.ResponseWriter, r *http.Request, body []byte) error {
		now := a.opts.Clock()
		nonce := r.Header.Get(signing.HeaderNonce)
		err := signing.Verify(a.opts.Secret, r.Method, r.URL.RequestURI(), r.Header.Get(signing.HeaderTimestamp),
			nonce, r.Header.Get(signing.HeaderSignature), body, now)
		if err == nil {
			err = a.nonces.Use(r.Context(), nonce, now)
		}
		if err != nil {
			return authError(err)
		}
		return h(w, r, body)
	})
}

func authError(err error) error {
	if errors.Is(err, signing.ErrWeakSecret) {
		// Never reached by a correctly started sidecar (serve refuses to start without a
		// usable secret); refusing is the safe answer if it ever is.
		return &Error{Status: http.StatusServiceUnavailable, Code: "no_shared_secret",
			Message: "the sidecar has no usable shared secret; see its log"}
	}
	codes := []struct {
		err  error
		code string
		msg  string
	}{
		{signing.ErrMissing, "missing_signature", "the request is not signed"},
		{signing.ErrMalformed, "malformed_signature", "the signature headers are malformed"},
		{signing.ErrStale, "stale_request", "the request timestamp is outside the allowed window; check both clocks"},
		{signing.ErrBad, "bad_signature", "the signature does not match; check the shared secret"},
		{signing.ErrReplayed, "replayed_request", "this request was already received"},
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return &Error{Status: http.StatusUnauthorized, Code: c.code, Message: c.msg}
		}
	}
	return err
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var apiErr *Error
	var invalid *intake.InvalidError
	var pe *portal.Error
	switch {
	case errors.As(err, &pe):
		status, code := portalError(pe)
		body := map[string]any{"code": code, "message": pe.Message}
		if len(pe.Fields) > 0 {
			body["fields"] = pe.Fields
		}
		if pe.CurrentETag != "" {
			body["current_etag"] = pe.CurrentETag
		}
		writeJSON(w, status, map[string]any{"error": body})
		return
	case errors.As(err, &apiErr):
	case errors.As(err, &invalid):
		apiErr = &Error{Status: http.StatusBadRequest, Code: "invalid_event", Message: invalid.Msg}
	default:
		// Logged here, once, with the detail; the caller only learns that it failed.
		a.opts.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		apiErr = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error"}
	}
	if apiErr.Status == http.StatusUnauthorized {
		a.opts.Logger.Warn("refused unauthenticated request", "path", r.URL.Path, "code", apiErr.Code, "remote", r.RemoteAddr)
	}
	writeJSON(w, apiErr.Status, map[string]any{"error": map[string]string{"code": apiErr.Code, "message": apiErr.Message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body is not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: "the body has trailing data"}
	}
	return nil
}

func (a *API) health(w http.ResponseWriter, _ *http.Request, _ []byte) error {
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": a.opts.Version, "schema": a.opts.Schema})
	return nil
}

func (a *API) ping(w http.ResponseWriter, _ *http.Request, body []byte) error {
	var req struct {
		NonceEcho string `json:"nonce_echo"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"pong": req.NonceEcho, "version": a.opts.Version, "time": a.opts.Clock().UTC().Format(time.RFC3339)})
	return nil
}

func (a *API) talkEvent(w http.ResponseWriter, r *http.Request, body []byte) error {
	var p intake.Payload
	if err := decodeStrict(body, &p); err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_event", Message: err.(*Error).Message}
	}
	ans, err := a.events.Handle(r.Context(), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}
