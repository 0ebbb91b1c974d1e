package webdav

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"time"
)

// Nextcloud's TaskProcessing OCS API (core/Controller/TaskProcessingApiController.php,
// Nextcloud 30+): the AI features an admin enabled (speech-to-text, …), usable by any
// account, here the bot's.
const taskProcessingPath = "/ocs/v2.php/taskprocessing"

// Task states as the API spells them (OCP\TaskProcessing\Task::statusToString).
const (
	TaskScheduled  = "STATUS_SCHEDULED"
	TaskRunning    = "STATUS_RUNNING"
	TaskSuccessful = "STATUS_SUCCESSFUL"
	TaskFailed     = "STATUS_FAILED"
	TaskCancelled  = "STATUS_CANCELLED"
)

// ProcessingTask is a TaskProcessing task (a subset of Task::jsonSerialize).
type ProcessingTask struct {
	ID       int64          `json:"id"`
	Type     string         `json:"type"`
	Status   string         `json:"status"`
	Output   map[string]any `json:"output"`
	CustomID string         `json:"customId"`
}

// TaskTypes lists the task types the server can run now (ids such as core:audio2text).
func (c *Client) TaskTypes(ctx context.Context) (map[string]bool, error) {
	var data struct {
		Types json.RawMessage `json:"types"`
	}
	if err := c.ocsAt(ctx, taskProcessingPath+"/tasktypes", "GET", "taskprocessing/tasktypes", nil, nil, &data); err != nil {
		return nil, err
	}
	// PHP encodes an empty map as [] (a server without AI providers).
	var types map[string]json.RawMessage
	if t := bytes.TrimSpace(data.Types); len(t) > 0 && t[0] == '{' {
		if err := json.Unmarshal(t, &types); err != nil {
			return nil, fmt.Errorf("webdav OCS GET taskprocessing/tasktypes: %w", err)
		}
	}
	out := make(map[string]bool, len(types))
	for id := range types {
		out[id] = true
	}
	return out, nil
}

// ScheduleTask schedules a task of type typ with input for appID.
func (c *Client) ScheduleTask(ctx context.Context, typ string, input map[string]any, appID, customID string) (ProcessingTask, error) {
	var data struct {
		Task ProcessingTask `json:"task"`
	}
	body := map[string]any{"type": typ, "input": input, "appId": appID, "customId": customID}
	if err := c.ocsAt(ctx, taskProcessingPath+"/schedule", "POST", "taskprocessing/schedule", nil, body, &data); err != nil {
		return ProcessingTask{}, err
	}
	if data.Task.ID == 0 {
		return ProcessingTask{}, fmt.Errorf("webdav OCS POST taskprocessing/schedule: no task in the answer")
	}
	return data.Task, nil
}

// ProcessingTaskByID reads a task's state and output.
func (c *Client) ProcessingTaskByID(ctx context.Context, id int64) (ProcessingTask, error) {
	var data struct {
		Task ProcessingTask `json:"task"`
	}
	rel := "taskprocessing/task/" + strconv.FormatInt(id, 10)
	if err := c.ocsAt(ctx, taskProcessingPath+"/task/"+url.PathEscape(strconv.FormatInt(id, 10)), "GET", rel, nil, nil, &data); err != nil {
		return ProcessingTask{}, err
	}
	return data.Task, nil
}

// FileID is Nextcloud's id of the bot's file name (listed from its folder: ListLevel
// addresses folders).
func (c *Client) FileID(ctx context.Context, name string) (int64, error) {
	rel, err := clean(name)
	if err != nil {
		return 0, err
	}
	fis, err := c.ListLevel(ctx, path.Dir(rel), DepthMembers)
	if err != nil {
		return 0, err
	}
	for _, fi := range fis {
		if p, err := clean(fi.Path); err == nil && p == rel && !fi.IsDir {
			if fi.FileID == 0 {
				return 0, fmt.Errorf("webdav PROPFIND %s: the server gave no file id", rel)
			}
			return fi.FileID, nil
		}
	}
	return 0, &Error{Op: "PROPFIND", Path: rel, Status: 404, kind: kindForStatus(404), Message: "no such file"}
}

// TaskAPI is the part of Client that schedules and reads TaskProcessing tasks.
type TaskAPI interface {
	ScheduleTask(ctx context.Context, typ string, input map[string]any, appID, customID string) (ProcessingTask, error)
	ProcessingTaskByID(ctx context.Context, id int64) (ProcessingTask, error)
}

// DefaultTaskPoll is how often AwaitTask reads a task that has not ended.
const DefaultTaskPoll = 2 * time.Second

// AwaitTask schedules a task and reads it every poll (0: DefaultTaskPoll) until it
// ends, successful, failed or cancelled, and returns it: Nextcloud's own background
// workers run it. When ctx ends first, the task as last read is returned with ctx's
// error; when Nextcloud cannot be asked, an error.
func AwaitTask(ctx context.Context, api TaskAPI, typ string, input map[string]any, appID, customID string, poll time.Duration) (ProcessingTask, error) {
	task, err := api.ScheduleTask(ctx, typ, input, appID, customID)
	if err != nil {
		return ProcessingTask{}, fmt.Errorf("schedule a %s task: %w", typ, err)
	}
	if poll <= 0 {
		poll = DefaultTaskPoll
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		switch task.Status {
		case TaskSuccessful, TaskFailed, TaskCancelled:
			return task, nil
		}
		select {
		case <-ctx.Done():
			return task, ctx.Err()
		case <-tick.C:
		}
		next, err := api.ProcessingTaskByID(ctx, task.ID)
		if err != nil {
			if ctx.Err() != nil {
				return task, ctx.Err()
			}
			return task, fmt.Errorf("read task %d: %w", task.ID, err)
		}
		task = next
	}
}
