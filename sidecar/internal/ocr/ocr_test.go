package ocr

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"codeberg.org/go-pdf/fpdf"

	"github.com/istota/istota/sidecar/internal/sandbox/sandboxtest"
	"github.com/istota/istota/sidecar/internal/sandbox/testrunner"
	"github.com/istota/istota/sidecar/internal/skills"
	"github.com/istota/istota/sidecar/internal/webdav"
)

func TestMain(m *testing.M) {
	code := m.Run()
	sandboxtest.Cleanup()
	os.Exit(code)
}

// ocrTaskType is how Nextcloud 33 lists its OCR task type in taskprocessing/tasktypes
// (TaskProcessingApiController::taskTypes, ImageToTextOpticalCharacterRecognition's
// shapes through ShapeDescriptor::jsonSerialize; PHP writes empty maps as {}).
const ocrTaskType = `"core:image2text:ocr":{"name":"Optical character recognition","description":"Extract text from an image",
"inputShape":{"input":{"name":"Input Image","description":"The image to extract text from","type":"Image"}},
"inputShapeEnumValues":{},"inputShapeDefaults":{},"optionalInputShape":{},"optionalInputShapeEnumValues":{},"optionalInputShapeDefaults":{},
"outputShape":{"output":{"name":"Output text","description":"The text that was extracted from the image","type":"Text"}},
"outputShapeEnumValues":{},"optionalOutputShape":{},"optionalOutputShapeEnumValues":{}}`

// fakeNextcloud plays Nextcloud 31+'s OCS TaskProcessing API and the bot's WebDAV
// folder listing, in the shapes of the server's own code.
type fakeNextcloud struct {
	types      string // the "types" value
	scheduleAs int    // status of the schedule answer; 0 is 200
	mu         sync.Mutex
	scheduled  []map[string]any
	reads      int
}

func (f *fakeNextcloud) serve(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		ocs := func(status int, data string) {
			w.Header().Set("Content-Type", "application/json")
			meta := `{"status":"ok","statuscode":200,"message":"OK"}`
			if status != http.StatusOK {
				meta = fmt.Sprintf(`{"status":"failure","statuscode":%d,"message":""}`, status)
				w.WriteHeader(status)
			}
			io.WriteString(w, `{"ocs":{"meta":`+meta+`,"data":`+data+`}}`)
		}
		task := func(status, output string) string {
			return `{"id":42,"type":"core:image2text:ocr","lastUpdated":1764172800,"status":"` + status + `","userId":"istota","appId":"istota",
"input":{"input":4711},"output":` + output + `,"customId":"istota-task-7","completionExpectedAt":1764172810,"progress":null,
"scheduledAt":1764172800,"startedAt":null,"endedAt":null}`
		}
		switch {
		case r.Method == "GET" && r.URL.Path == "/ocs/v2.php/taskprocessing/tasktypes":
			ocs(200, `{"types":`+f.types+`}`)
		case r.Method == "POST" && r.URL.Path == "/ocs/v2.php/taskprocessing/schedule":
			var body map[string]any
			json.NewDecoder(r.Body).Decode(&body)
			f.scheduled = append(f.scheduled, body)
			if f.scheduleAs != 0 {
				ocs(f.scheduleAs, `{"message":"User does not have access to the files mentioned in the task input"}`)
				return
			}
			ocs(200, `{"task":`+task("STATUS_SCHEDULED", "null")+`}`)
		case r.Method == "GET" && r.URL.Path == "/ocs/v2.php/taskprocessing/task/42":
			f.reads++
			if f.reads < 2 {
				ocs(200, `{"task":`+task("STATUS_RUNNING", "null")+`}`)
				return
			}
			ocs(200, `{"task":`+task("STATUS_SUCCESSFUL", `{"output":"  Total due 99 EUR, read by Nextcloud\n"}`)+`}`)
		case r.Method == "PROPFIND" && r.URL.Path == "/remote.php/dav/files/istota/Users/alice/inbox/":
			w.WriteHeader(http.StatusMultiStatus)
			io.WriteString(w, `<?xml version="1.0"?><d:multistatus xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
<d:response><d:href>/remote.php/dav/files/istota/Users/alice/inbox/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype><oc:fileid>100</oc:fileid></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
<d:response><d:href>/remote.php/dav/files/istota/Users/alice/inbox/receipt.png</d:href><d:propstat><d:prop><d:resourcetype/><d:getcontentlength>12</d:getcontentlength><oc:fileid>4711</oc:fileid></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
</d:multistatus>`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// workspace is alice's workspace with a scanned two-page PDF and a photo of its first
// page (made by Debian's pdftoppm from the PDF).
func workspace(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{TesseractPath, PdftoppmPath} {
		if _, err := os.Stat(tool); err != nil {
			t.Fatalf("this test needs %s (scripts/deps.sh): %v", tool, err)
		}
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		os.Chmod(d, 0o711)
	}
	ws := filepath.Join(base, "alice")
	if err := os.MkdirAll(filepath.Join(ws, "inbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	pdf := fpdf.New("P", "mm", "A4", "")
	pdf.SetFont("Helvetica", "", 28)
	pdf.AddPage()
	pdf.Text(20, 40, "Plumbing invoice")
	pdf.Text(20, 60, "Total due 4217 EUR")
	pdf.AddPage()
	pdf.Text(20, 40, "Second page thanks")
	scan := filepath.Join(ws, "inbox", "scan.pdf")
	if err := pdf.OutputFileAndClose(scan); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(PdftoppmPath, "-r", "150", "-png", "-f", "1", "-l", "1", "-singlefile", scan, filepath.Join(ws, "inbox", "receipt")).CombinedOutput(); err != nil {
		t.Fatalf("pdftoppm: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(ws, "inbox", "notes.txt"), []byte("text"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "inbox", "link.png")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "inbox", "dir.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	return ws
}

type fixture struct {
	ws    string
	nc    *fakeNextcloud
	skill skills.Skill
}

func newFixture(t *testing.T, types string, withNextcloud, withLocal bool) *fixture {
	t.Helper()
	f := &fixture{ws: workspace(t), nc: &fakeNextcloud{types: types}}
	opts := SkillOptions{Root: func(uid string) (string, error) {
		if uid != "alice" {
			return "", fmt.Errorf("no workspace for %s", uid)
		}
		return f.ws, nil
	}}
	if withNextcloud {
		srv := f.nc.serve(t)
		c, err := webdav.New(webdav.Options{URL: srv.URL, User: "istota", Password: "pw"})
		if err != nil {
			t.Fatal(err)
		}
		opts.Nextcloud = &Nextcloud{API: c, Remote: func(uid, rel string) string { return path.Join("Users", uid, rel) }, Poll: 10 * time.Millisecond}
	}
	if withLocal {
		runner, _ := testrunner.Runner(t)
		opts.Local = &Tesseract{Runner: runner}
	}
	reg := skills.NewRegistry()
	if err := RegisterSkill(reg, opts); err != nil {
		t.Fatal(err)
	}
	sk, ok := reg.Lookup(SkillName)
	if !ok {
		t.Fatal("the skill is not registered")
	}
	f.skill = sk
	return f
}

func (f *fixture) run(args ...string) skills.Result {
	return f.skill.Run(context.Background(), skills.Invocation{UserID: "alice", TaskID: 7, Args: args})
}

// TestNextcloudReadsImagesFirst: where Nextcloud lists its OCR task type, an image is
// read by it, on the bot's copy of the file, and tesseract is not needed.
func TestNextcloudReadsImagesFirst(t *testing.T) {
	f := newFixture(t, `{`+ocrTaskType+`}`, true, false)
	r := f.run("/workspace/inbox/receipt.png")
	if r.ExitCode != 0 || string(r.Stdout) != "Total due 99 EUR, read by Nextcloud\n(read by Nextcloud's OCR)\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q, err %v", r.ExitCode, r.Stdout, r.Stderr, r.Err)
	}
	if len(f.nc.scheduled) != 1 {
		t.Fatalf("scheduled %v", f.nc.scheduled)
	}
	got := f.nc.scheduled[0]
	if got["type"] != ImageToText || got["appId"] != "istota" || got["customId"] != "istota-task-7" || got["input"].(map[string]any)["input"] != float64(4711) {
		t.Errorf("scheduled %v", got)
	}
	if f.nc.reads != 2 {
		t.Errorf("the task was read %d times, want until it succeeded (2)", f.nc.reads)
	}
}

// TestTesseractWhenNextcloudCannot: a Nextcloud without an OCR provider (Nextcloud 31's
// answer "types": [] on a server without AI apps), one whose task type is listed but
// that refuses the task, and a PDF (which Nextcloud's image OCR does not take) are read
// by the real tesseract in a real sandbox.
func TestTesseractWhenNextcloudCannot(t *testing.T) {
	f := newFixture(t, `[]`, true, true)
	r := f.run("inbox/receipt.png")
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "Total due 4217 EUR") || !strings.HasSuffix(string(r.Stdout), "(read by tesseract)\n") {
		t.Fatalf("no provider: exit %d, stdout %q, stderr %q, err %v", r.ExitCode, r.Stdout, r.Stderr, r.Err)
	}
	if len(f.nc.scheduled) != 0 {
		t.Errorf("a task was scheduled without a provider: %v", f.nc.scheduled)
	}

	f.nc.types, f.nc.scheduleAs = `{`+ocrTaskType+`}`, http.StatusUnauthorized
	r = f.run("inbox/receipt.png", "--lang", "eng")
	if r.ExitCode != 0 || !strings.Contains(string(r.Stdout), "Total due 4217 EUR") || !strings.Contains(string(r.Stdout), "(read by tesseract)") || len(f.nc.scheduled) != 1 {
		t.Fatalf("Nextcloud refused: exit %d, stdout %q, stderr %q", r.ExitCode, r.Stdout, r.Stderr)
	}

	r = f.run("inbox/scan.pdf")
	out := string(r.Stdout)
	if r.ExitCode != 0 || !strings.Contains(out, "Plumbing invoice") || !strings.Contains(out, "Second page thanks") || !strings.Contains(out, "\f") {
		t.Fatalf("PDF: exit %d, stdout %q, stderr %q, err %v", r.ExitCode, r.Stdout, r.Stderr, r.Err)
	}
	if len(f.nc.scheduled) != 1 {
		t.Errorf("a PDF went to Nextcloud's image OCR: %v", f.nc.scheduled)
	}
	if strings.Index(out, "Plumbing") > strings.Index(out, "Second page") {
		t.Errorf("pages out of order: %q", out)
	}

	// A language tesseract does not have is tesseract's error, said plainly.
	r = f.run("inbox/receipt.png", "--lang=xyz")
	if r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "could not be read: tesseract failed") {
		t.Errorf("missing language: exit %d, %q", r.ExitCode, r.Stderr)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t, `[]`, false, true)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no file"},
		{[]string{"a.png", "b.png"}, 2, "give one file"},
		{[]string{"--bogus", "a.png"}, 2, "unknown option"},
		{[]string{"--lang", "../x", "a.png"}, 2, "not a list of tesseract languages"},
		{[]string{"--lang"}, 2, "--lang needs"},
		{[]string{"../bob/inbox/receipt.png"}, 2, "not a path in your workspace"},
		{[]string{"/etc/shadow.png"}, 2, "not a path in your workspace"},
		{[]string{"inbox/notes.txt"}, 2, "not an image or a PDF"},
		{[]string{"inbox/missing.png"}, 1, "does not exist in your workspace"},
		{[]string{"inbox/link.png"}, 1, "symbolic link"},
		{[]string{"inbox/dir.png"}, 1, "not a file"},
	} {
		r := f.run(tc.args...)
		if r.ExitCode != tc.code || !strings.Contains(string(r.Stderr), tc.want) || len(r.Stdout) != 0 {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want %d and %q", tc.args, r.ExitCode, r.Stderr, r.Stdout, tc.code, tc.want)
		}
	}

	none := newFixture(t, `[]`, true, false)
	if r := none.run("inbox/receipt.png"); r.ExitCode != 1 || !strings.Contains(string(r.Stderr), "no OCR is available") {
		t.Errorf("nothing to read with: exit %d, %q", r.ExitCode, r.Stderr)
	}
}

// TestTesseractTimeout: a read that outlasts its time is stopped, sandbox and all.
func TestTesseractTimeout(t *testing.T) {
	ws := workspace(t)
	runner, uid := testrunner.Runner(t)
	tess := &Tesseract{Runner: runner, Timeout: 300 * time.Millisecond}
	_, err := tess.Read(context.Background(), Job{UserID: "alice", TaskID: 7, File: filepath.Join(ws, "inbox", "scan.pdf"), Kind: PDF})
	if err == nil || !strings.Contains(err.Error(), "did not finish within") {
		t.Fatalf("err = %v", err)
	}
	if os.Geteuid() == 0 {
		deadline := time.Now().Add(10 * time.Second)
		for len(testrunner.ProcessesOf(uid)) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("left behind: %q", testrunner.ProcessesOf(uid))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
