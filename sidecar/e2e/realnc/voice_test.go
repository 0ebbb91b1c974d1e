package realnc

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"codeberg.org/go-pdf/fpdf"

	"github.com/istota/istota/sidecar/internal/brain/claude/fakeapi"
)

// testVoice: a voice message alice shares in Talk (an .ogg the app copies into her
// inbox/) is transcribed before the agent starts. Without a speech-to-text service she
// is told so in the conversation and the agent knows; once the admin sets one (an
// OpenAI-compatible endpoint on loopback here), the transcript is in the agent's prompt
// and the service got the audio with the key, which the sandbox never sees.
func testVoice(t *testing.T, e *env) {
	nc := e.nc
	nts := nc.noteToSelf(t, "alice")
	nc.enableBot(t, "alice", nts)
	audio := []byte("OggS\x00\x02fake-opus-voice-message")

	t.Run("nothing can transcribe", func(t *testing.T) {
		nc.putFile(t, "alice", "Talk/vm0-voice.ogg", audio)
		e.script("vm0-voice", fakeapi.Reply("Sorry, I could not hear it. [vm0-answer]").Expecting(func(r *fakeapi.Recorded) error {
			if !strings.Contains(r.UserText(), "could not be transcribed: no speech-to-text service is set up") {
				return fmt.Errorf("the prompt does not say the voice message was not transcribed")
			}
			return nil
		}))
		before := lastID(nc.messages(t, "alice", nts))
		nc.shareIntoRoom(t, "alice", "/Talk/vm0-voice.ogg", nts)
		replies := e.waitBotReplies(t, "alice", nts, before, 2, 2*time.Minute)
		all := replies[0].Message + "\n" + replies[1].Message
		mustContain(t, "the bot's messages", all, "I cannot listen to voice messages here", "[vm0-answer]")
	})

	t.Run("an OpenAI-compatible service", func(t *testing.T) {
		var mu sync.Mutex
		var got struct{ auth, model, audio, mime string }
		stt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/audio/transcriptions" || r.ParseMultipartForm(1<<20) != nil {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			f, hdr, err := r.FormFile("file")
			if err != nil {
				http.Error(w, "no file", http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(f)
			mu.Lock()
			got.auth, got.model, got.audio, got.mime = r.Header.Get("Authorization"), r.FormValue("model"), string(b), hdr.Header.Get("Content-Type")
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"text":"Please buy oat milk on the way home. [vm1-said]"}`)
		}))
		defer stt.Close()
		cfg, err := os.OpenFile(e.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(cfg, "\n[transcription]\nbase_url = %q\napi_key = \"sk-stt-realnc-secret\"\nmodel = \"whisper-large-v3\"\n", stt.URL+"/v1")
		cfg.Close()
		e.sc.stop(t)
		e.sc.start(t)

		nc.putFile(t, "alice", "Talk/vm1-voice.ogg", audio)
		e.script("vm1-voice",
			fakeapi.Bash("Checking.", `echo "key-in-env=$(env | grep -c sk-stt-realnc)"`).Expecting(func(r *fakeapi.Recorded) error {
				if !strings.Contains(r.UserText(), "Transcript of the voice message inbox/") || !strings.Contains(r.UserText(), "Please buy oat milk on the way home. [vm1-said]") {
					return fmt.Errorf("the prompt lacks the transcript")
				}
				return nil
			}),
			fakeapi.Reply("Oat milk it is. [vm1-answer]").Expecting(fakeapi.ExpectToolResult("key-in-env=0")))
		before := lastID(nc.messages(t, "alice", nts))
		nc.shareIntoRoom(t, "alice", "/Talk/vm1-voice.ogg", nts)
		waitUntil(t, "the answer to the voice message", 2*time.Minute, func() bool {
			for _, m := range botMessagesAfter(nc.messages(t, "alice", nts), before) {
				if strings.Contains(m.Message, "[vm1-answer]") {
					return true
				}
			}
			return false
		}, e.sc.logs)
		mu.Lock()
		defer mu.Unlock()
		if got.auth != "Bearer sk-stt-realnc-secret" || got.model != "whisper-large-v3" || got.audio != string(audio) || got.mime != "audio/ogg" {
			t.Errorf("the speech-to-text service got %+v", got)
		}
		for _, m := range botMessagesAfter(nc.messages(t, "alice", nts), before) {
			if strings.Contains(m.Message, "cannot listen") {
				t.Errorf("told alice nothing can transcribe although a service is set: %q", m.Message)
			}
		}
	})

	// A photo: this Nextcloud has no OCR provider (its task types list none), so the ocr
	// skill reads it with tesseract in a sandbox of its own.
	t.Run("a photo without an OCR provider", func(t *testing.T) {
		// The premise: this Nextcloud lists no OCR task type (31 has none in core, and no
		// provider app is installed), so the skill's first choice answers "none".
		if r := nc.ocs(t, "alice", "GET", "/ocs/v2.php/taskprocessing/tasktypes", nil); r.Status != http.StatusOK || strings.Contains(string(r.Data), "core:image2text:ocr") {
			t.Fatalf("task types: %d %s", r.Status, r.Data)
		}
		nc.putFile(t, "alice", "Talk/oc0-receipt.png", receiptPNG(t))
		e.script("oc0-receipt",
			fakeapi.Bash("Reading the photo.", `istota skill ocr "$(ls /workspace/inbox/*oc0-receipt*.png | head -n 1)"; echo "ocr-exit=$?"`),
			fakeapi.Reply("It says 4217 EUR. [oc0-answer]").Expecting(func(r *fakeapi.Recorded) error {
				for _, want := range []string{"Total due 4217 EUR", "(read by tesseract)", "ocr-exit=0"} {
					if err := fakeapi.ExpectToolResult(want)(r); err != nil {
						return err
					}
				}
				return nil
			}))
		before := lastID(nc.messages(t, "alice", nts))
		nc.shareIntoRoom(t, "alice", "/Talk/oc0-receipt.png", nts)
		waitUntil(t, "the answer to the photo", 2*time.Minute, func() bool {
			for _, m := range botMessagesAfter(nc.messages(t, "alice", nts), before) {
				if strings.Contains(m.Message, "[oc0-answer]") {
					return true
				}
			}
			return false
		}, e.sc.logs)
	})
	if f := e.api.Failures(); len(f) > 0 {
		t.Fatalf("fake API expectations failed: %v", f)
	}
}

// receiptPNG is a photo of a receipt: a PDF page drawn with fpdf, rasterised by
// Debian's pdftoppm.
func receiptPNG(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	pdf := fpdf.New("P", "mm", "A4", "")
	pdf.SetFont("Helvetica", "", 28)
	pdf.AddPage()
	pdf.Text(20, 40, "Plumbing invoice")
	pdf.Text(20, 60, "Total due 4217 EUR")
	if err := pdf.OutputFileAndClose(filepath.Join(dir, "r.pdf")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("pdftoppm", "-r", "150", "-png", "-singlefile", filepath.Join(dir, "r.pdf"), filepath.Join(dir, "r")).CombinedOutput(); err != nil {
		t.Fatalf("pdftoppm: %v %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "r.png"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lastID is the id of the newest message.
func lastID(msgs []chatMessage) int64 {
	if len(msgs) == 0 {
		return 0
	}
	return msgs[len(msgs)-1].ID
}
