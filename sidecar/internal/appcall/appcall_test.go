package appcall

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/istota/istota/sidecar/internal/signing"
)

const secret = "appcall-test-secret-0123456789abcdef"

// The call is signed over the path as Nextcloud sees it (webroot included), and the
// answer's OCS envelope is read.
func TestReadyIsSignedAndReadsTheAnswer(t *testing.T) {
	var gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		gotPath = r.URL.Path
		err := signing.Verify([]byte(secret), r.Method, r.URL.RequestURI(), r.Header.Get(signing.HeaderTimestamp),
			r.Header.Get(signing.HeaderNonce), r.Header.Get(signing.HeaderSignature), body, time.Now())
		if err != nil || r.Header.Get("OCS-APIRequest") != "true" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"ocs":{"meta":{"status":"ok"},"data":{"delivered":3,"complete":true}}}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/nextcloud/", []byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Ready(context.Background())
	if err != nil || res.Delivered != 3 || !res.Complete {
		t.Fatalf("ready: %+v %v", res, err)
	}
	if gotPath != "/nextcloud"+ReadyPath {
		t.Fatalf("path %s", gotPath)
	}

	other, _ := New(srv.URL+"/nextcloud", []byte("another-secret-0123456789abcdefghij"), nil)
	if _, err := other.Ready(context.Background()); !errors.Is(err, ErrRefused) {
		t.Fatalf("with another secret: %v", err)
	}
	if _, err := New(srv.URL, []byte("short"), nil); err == nil {
		t.Fatal("a short secret was accepted")
	}
}

// Posted signs its JSON body and reads the ids back.
func TestPostedSignsItsBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if signing.Verify([]byte(secret), r.Method, r.URL.RequestURI(), r.Header.Get(signing.HeaderTimestamp),
			r.Header.Get(signing.HeaderNonce), r.Header.Get(signing.HeaderSignature), body, time.Now()) != nil ||
			string(body) != `{"reference_ids":["a","b"],"token":"room1"}` {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"ocs":{"data":{"posted":["b"]}}}`)
	}))
	defer srv.Close()
	c, _ := New(srv.URL, []byte(secret), nil)
	got, err := c.Posted(context.Background(), "room1", []string{"a", "b"})
	if err != nil || len(got) != 1 || got[0] != "b" {
		t.Fatalf("posted: %v %v", got, err)
	}
}

// The app's refusals of a request (400, 403) come back with their code and message for
// the caller; a missing route or a wrong signature stays ErrRefused.
func TestRefusalsCarryTheAppsCodeAndMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case SharePath:
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"ocs":{"meta":{"status":"failure"},"data":{"code":"not_owner","message":"\"x\" belongs to bob"}}}`)
		case MkdirPath:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"ocs":{"meta":{"status":"failure"},"data":{"code":"invalid_request","message":"give the folder to create"}}}`)
		case PostTargetPath:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `not json`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, []byte(secret), nil)
	ctx := context.Background()
	var rej *RejectedError
	if _, err := c.Share(ctx, ShareRequest{User: "alice", Path: "x", Type: "link"}); !errors.As(err, &rej) ||
		rej.Status != 403 || rej.Code != "not_owner" || rej.Message != `"x" belongs to bob` {
		t.Fatalf("share: %v", err)
	}
	if _, err := c.Mkdir(ctx, "alice", ""); !errors.As(err, &rej) || rej.Status != 400 || rej.Code != "invalid_request" {
		t.Fatalf("mkdir: %v", err)
	}
	if _, err := c.PostTarget(ctx, "alice", "abcd"); err == nil || errors.As(err, &rej) {
		t.Fatalf("a 400 without the app's error body: %v", err)
	}
	if _, err := c.Conversations(ctx, "alice"); !errors.Is(err, ErrRefused) {
		t.Fatalf("a missing route: %v", err)
	}
}
