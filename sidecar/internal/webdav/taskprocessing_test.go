package webdav

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The TaskProcessing calls speak Nextcloud's OCS shapes (TaskProcessingApiController,
// Task::jsonSerialize) and the file id comes from oc:fileid.
func TestTaskProcessing(t *testing.T) {
	var scheduled map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "PROPFIND" && r.Header.Get("OCS-APIRequest") != "true" {
			http.Error(w, "no OCS header", http.StatusPreconditionFailed)
			return
		}
		ok := func(data string) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ocs":{"meta":{"status":"ok","statuscode":200,"message":"OK"},"data":`+data+`}}`)
		}
		switch {
		case r.Method == "GET" && r.URL.Path == "/ocs/v2.php/taskprocessing/tasktypes":
			ok(`{"types":{"core:audio2text":{"name":"Transcribe audio","inputShape":{"input":{"type":2}}},"core:text2text":{"name":"Free prompt"}}}`)
		case r.Method == "POST" && r.URL.Path == "/ocs/v2.php/taskprocessing/schedule":
			json.NewDecoder(r.Body).Decode(&scheduled)
			ok(`{"task":{"id":42,"type":"core:audio2text","status":"STATUS_SCHEDULED","userId":"istota","appId":"istota","input":{"input":4711},"output":null,"customId":"istota-task-3"}}`)
		case r.Method == "GET" && r.URL.Path == "/ocs/v2.php/taskprocessing/task/42":
			ok(`{"task":{"id":42,"type":"core:audio2text","status":"STATUS_SUCCESSFUL","output":{"output":"Call mum."},"customId":"istota-task-3"}}`)
		case r.Method == "PROPFIND" && strings.HasSuffix(r.URL.Path, "/Users/alice/inbox/"):
			w.WriteHeader(http.StatusMultiStatus)
			io.WriteString(w, `<?xml version="1.0"?><d:multistatus xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
<d:response><d:href>/remote.php/dav/files/istota/Users/alice/inbox/</d:href><d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype><oc:fileid>100</oc:fileid></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
<d:response><d:href>/remote.php/dav/files/istota/Users/alice/inbox/voice.ogg</d:href><d:propstat><d:prop><d:resourcetype/><d:getcontentlength>12</d:getcontentlength><oc:fileid>4711</oc:fileid></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
</d:multistatus>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := New(Options{URL: srv.URL, User: "istota", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	types, err := c.TaskTypes(ctx)
	if err != nil || !types["core:audio2text"] || !types["core:text2text"] || len(types) != 2 {
		t.Fatalf("types %v, %v", types, err)
	}
	id, err := c.FileID(ctx, "Users/alice/inbox/voice.ogg")
	if err != nil || id != 4711 {
		t.Fatalf("file id %d, %v", id, err)
	}
	if _, err := c.FileID(ctx, "Users/alice/inbox/other.ogg"); err == nil {
		t.Error("a missing file got an id")
	}
	task, err := c.ScheduleTask(ctx, "core:audio2text", map[string]any{"input": id}, "istota", "istota-task-3")
	if err != nil || task.ID != 42 || task.Status != TaskScheduled {
		t.Fatalf("schedule: %+v, %v", task, err)
	}
	if scheduled["type"] != "core:audio2text" || scheduled["appId"] != "istota" || scheduled["customId"] != "istota-task-3" || scheduled["input"].(map[string]any)["input"] != float64(4711) {
		t.Errorf("scheduled %v", scheduled)
	}
	task, err = c.ProcessingTaskByID(ctx, 42)
	if err != nil || task.Status != TaskSuccessful || task.Output["output"] != "Call mum." {
		t.Fatalf("task: %+v, %v", task, err)
	}

	// A Nextcloud without AI providers answers "types": [] (PHP's empty array).
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ocs":{"meta":{"status":"ok","statuscode":200,"message":"OK"},"data":{"types":[]}}}`)
	}))
	defer empty.Close()
	c, _ = New(Options{URL: empty.URL, User: "istota", Password: "pw"})
	if types, err := c.TaskTypes(ctx); err != nil || len(types) != 0 {
		t.Fatalf("no providers: %v, %v", types, err)
	}
}
