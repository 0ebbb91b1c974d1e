package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"codeberg.org/go-pdf/fpdf"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// Photos, scans and recordings in the workspace: the real CLI in the sandbox reads a
// scanned PDF with Debian's pdftoppm and tesseract (no model weights fetched), and turns
// a recording into text with `istota skill transcribe`, which the sidecar sends to the
// admin's speech-to-text service with a key the sandbox never sees.
func TestOCRAndTranscribeSkill(t *testing.T) {
	for _, tool := range []string{"/usr/bin/tesseract", "/usr/bin/pdftoppm"} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("%s is missing: run scripts/deps.sh", tool)
		}
	}
	var sttAuth string
	stt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ParseMultipartForm(1<<20) != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		f, _, err := r.FormFile("file")
		if err != nil {
			http.Error(w, "no file", http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(f)
		sttAuth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":"Recording says: call the plumber (%d bytes)."}`, len(b))
	}))
	defer stt.Close()

	f := newFixtureWith(t, fakeapi.Script{
		fakeapi.Bash("Reading the scan.", "pdftoppm -r 200 -png /workspace/scan.pdf /tmp/page && tesseract /tmp/page-1.png - 2>/dev/null").Expecting(func(r *fakeapi.Recorded) error {
			if !strings.Contains(r.UserText(), "tesseract IMAGE") || !strings.Contains(r.UserText(), "istota skill ocr FILE") {
				return fmt.Errorf("the prompt does not mention OCR")
			}
			return nil
		}),
		fakeapi.Bash("Listening.", `istota skill transcribe /workspace/memo.ogg; echo "exit=$?"; echo "key-in-env=$(env | grep -c sk-stt-e2e)"`).
			Expecting(fakeapi.ExpectToolResult("Total due 4217 EUR")),
		// The ocr skill reads the same scan outside the agent's sandbox, with tesseract in
		// one of its own (a PDF never goes to Nextcloud's image OCR).
		fakeapi.Bash("Reading it again.", `istota skill ocr /workspace/scan.pdf; echo "ocr-exit=$?"`).Expecting(func(r *fakeapi.Recorded) error {
			for _, want := range []string{"Recording says: call the plumber (14 bytes).", "exit=0", "key-in-env=0"} {
				if err := fakeapi.ExpectToolResult(want)(r); err != nil {
					return err
				}
			}
			return nil
		}),
		fakeapi.Reply("Scan read, memo heard.").Expecting(func(r *fakeapi.Recorded) error {
			for _, want := range []string{"Plumbing invoice", "Total due 4217 EUR", "(read by tesseract)", "ocr-exit=0"} {
				if err := fakeapi.ExpectToolResult(want)(r); err != nil {
					return err
				}
			}
			return nil
		}),
	}, sidecarOptions{progressInterval: "0s", extraConfig: fmt.Sprintf("\n[transcription]\nbase_url = %q\napi_key = \"sk-stt-e2e-secret\"\n", stt.URL+"/v1")}, "media001")

	ws := filepath.Join(f.sc.dir, "data", "users", "alice", "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	pdf := fpdf.New("P", "mm", "A4", "")
	pdf.AddPage()
	pdf.SetFont("Helvetica", "", 28)
	pdf.Text(20, 40, "Plumbing invoice")
	pdf.Text(20, 60, "Total due 4217 EUR")
	if err := pdf.OutputFileAndClose(filepath.Join(ws, "scan.pdf")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "memo.ogg"), []byte("OggS-recording"), 0o644)
	f.sc.start()

	f.say(t, "media001", 1, "alice", "What does the scan say, and what is on my recording?")
	waitFor(t, "the answer", 3*time.Minute, func() bool {
		for _, m := range f.talk.Messages() {
			if strings.Contains(m.Message, "Scan read, memo heard.") {
				return true
			}
		}
		return false
	}, f.sc.logs)
	if fails := f.api.Failures(); len(fails) > 0 {
		t.Fatalf("fake API: %v\n%s", fails, f.sc.logs())
	}
	if sttAuth != "Bearer sk-stt-e2e-secret" {
		t.Errorf("the speech-to-text service got Authorization %q", sttAuth)
	}
}
