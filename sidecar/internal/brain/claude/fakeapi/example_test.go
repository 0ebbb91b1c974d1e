package fakeapi_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// A test points ANTHROPIC_BASE_URL at srv.URL() and runs the real CLI; here a plain
// HTTP client stands in for it.
func Example() {
	srv := fakeapi.New(nil, fakeapi.ToolFlow("echo hello-from-tool", "hello-from-tool", "Done."))
	defer srv.Close()
	srv.AddScript("billing", fakeapi.Marker("[task-42]"), fakeapi.Script{fakeapi.Error(529).Times(2), fakeapi.Reply("ok")})

	resp, err := http.Post(srv.URL()+"/v1/messages?beta=true", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"[task-42] hi"}]}`))
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.Contains(string(body), "overloaded_error"))
	r := srv.Requests()[0]
	fmt.Println(r.Conversation, r.Answer, r.Model)
	// Output:
	// 529 true
	// billing error m
}
