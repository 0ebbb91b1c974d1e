package signing

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"
)

// vector is one case of testdata/vectors.json, shared with the PHP tests.
type vector struct {
	Name      string `json:"name"`
	Secret    string `json:"secret"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	Timestamp string `json:"timestamp"`
	Nonce     string `json:"nonce"`
	Body      string `json:"body"`
	Canonical string `json:"canonical"`
	Signature string `json:"signature"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 3 {
		t.Fatalf("expected several vectors, got %d", len(vs))
	}
	return vs
}

func TestVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			if got := Canonical(v.Method, v.Path, v.Timestamp, v.Nonce, []byte(v.Body)); got != v.Canonical {
				t.Errorf("canonical:\n got %q\nwant %q", got, v.Canonical)
			}
			if got, err := Sign([]byte(v.Secret), v.Method, v.Path, v.Timestamp, v.Nonce, []byte(v.Body)); err != nil || got != v.Signature {
				t.Errorf("signature: got %s (%v) want %s", got, err, v.Signature)
			}
			sec, _ := strconv.ParseInt(v.Timestamp, 10, 64)
			if err := Verify([]byte(v.Secret), v.Method, v.Path, v.Timestamp, v.Nonce, v.Signature, []byte(v.Body), time.Unix(sec, 0)); err != nil {
				t.Errorf("verify: %v", err)
			}
		})
	}
}
