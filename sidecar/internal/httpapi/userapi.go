package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/istota/istota/sidecar/internal/approval"
	"github.com/istota/istota/sidecar/internal/portal"
)

// routePortal adds the settings pages' endpoints (docs/user-api.md). The uid in the
// path is believed only because the request is signed.
func (a *API) routePortal() {
	p := a.opts.Portal
	if p == nil {
		return
	}
	user := func(pattern string, h func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error) {
		a.mux.HandleFunc(pattern, a.signed(func(w http.ResponseWriter, r *http.Request, body []byte) error {
			uid := r.PathValue("uid")
			if uid == "" || len(uid) > 255 {
				return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "bad user id"}
			}
			return h(w, r, uid, body)
		}))
	}
	ok := func(w http.ResponseWriter, v any, err error) error {
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}

	user("POST /v1/users/{uid}/session", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		var in portal.Session
		if err := decodeRequest(body, &in); err != nil {
			return err
		}
		ans, err := p.StartSession(r.Context(), uid, in)
		return ok(w, ans, err)
	})
	user("POST /v1/users/{uid}/conversation", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		var in portal.HomeConversation
		if err := decodeRequest(body, &in); err != nil {
			return err
		}
		ans, err := p.SetHomeConversation(r.Context(), uid, in)
		return ok(w, ans, err)
	})
	user("GET /v1/users/{uid}/status", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		st, err := p.Status(r.Context(), uid)
		return ok(w, st, err)
	})
	user("GET /v1/users/{uid}/tasks/{id}/events", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		after, err := queryInt(r, "after", 0)
		if err != nil {
			return err
		}
		evs, err := p.TaskEvents(r.Context(), uid, id, after)
		return ok(w, evs, err)
	})
	user("POST /v1/users/{uid}/stop", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		st, err := p.Stop(r.Context(), uid)
		return ok(w, st, err)
	})
	user("GET /v1/users/{uid}/approvals", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		a, err := p.Approvals(r.Context(), uid)
		return ok(w, a, err)
	})
	user("POST /v1/users/{uid}/approvals/{id}", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		var in struct {
			Approve *bool `json:"approve"`
		}
		if err := decodeRequest(body, &in); err != nil {
			return err
		}
		if in.Approve == nil {
			return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "approve (true or false) is required"}
		}
		req, err := p.DecideApproval(r.Context(), uid, id, *in.Approve)
		return ok(w, req, err)
	})
	user("PUT /v1/users/{uid}/approvals/policies", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		var in approval.Policies
		if err := decodeRequest(body, &in); err != nil {
			return err
		}
		pols, err := p.SaveApprovalPolicies(r.Context(), uid, in)
		return ok(w, pols, err)
	})
	user("GET /v1/users/{uid}/memory/user", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		doc, err := p.UserMD(r.Context(), uid)
		return ok(w, doc, err)
	})
	user("PUT /v1/users/{uid}/memory/user", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		var in struct {
			Content *string `json:"content"`
			ETag    string  `json:"etag"`
		}
		if err := decodeRequest(body, &in); err != nil {
			return err
		}
		if in.Content == nil {
			return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "content is required"}
		}
		tag, err := p.SaveUserMD(r.Context(), uid, *in.Content, in.ETag)
		return ok(w, map[string]string{"etag": tag}, err)
	})
	user("GET /v1/users/{uid}/memory/audit", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		limit, err := queryInt(r, "limit", 50)
		if err != nil {
			return err
		}
		es, err := p.Audit(r.Context(), uid, int(limit))
		return ok(w, map[string]any{"entries": es}, err)
	})
	user("GET /v1/users/{uid}/memory/channels", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		cs, err := p.Channels(r.Context(), uid)
		return ok(w, map[string]any{"channels": cs}, err)
	})
	user("GET /v1/users/{uid}/memory/dated", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		days, err := queryInt(r, "days", 30)
		if err != nil {
			return err
		}
		ds, err := p.Dated(r.Context(), uid, int(days))
		return ok(w, map[string]any{"days": ds}, err)
	})
	user("GET /v1/users/{uid}/memory/facts", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		fs, err := p.Facts(r.Context(), uid)
		return ok(w, map[string]any{"facts": fs}, err)
	})
	user("POST /v1/users/{uid}/memory/facts/{id}/invalidate", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		return ok(w, map[string]bool{"ok": true}, p.InvalidateFact(r.Context(), uid, id))
	})
	user("DELETE /v1/users/{uid}/memory/facts/{id}", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		return ok(w, map[string]bool{"ok": true}, p.DeleteFact(r.Context(), uid, id))
	})
	user("GET /v1/users/{uid}/memory/search", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		limit, err := queryInt(r, "limit", 20)
		if err != nil {
			return err
		}
		hits, err := p.Search(r.Context(), uid, r.URL.Query().Get("q"), int(limit))
		return ok(w, map[string]any{"results": hits}, err)
	})
	user("GET /v1/users/{uid}/schedule", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		sc, err := p.Schedule(r.Context(), uid)
		return ok(w, sc, err)
	})
	user("POST /v1/users/{uid}/schedule/jobs/{name}/{action}", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		action := portal.JobAction(r.PathValue("action"))
		switch action {
		case portal.JobEnable, portal.JobDisable, portal.JobRun:
		default:
			return &Error{Status: http.StatusNotFound, Code: "not_found", Message: "unknown action (want enable, disable or run)"}
		}
		j, err := p.ActOnJob(r.Context(), uid, r.PathValue("name"), action)
		return ok(w, j, err)
	})
	user("GET /v1/users/{uid}/settings", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		s, err := p.Prefs(r.Context(), uid)
		return ok(w, s, err)
	})
	user("PUT /v1/users/{uid}/settings", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		up, err := decodePrefs(body)
		if err != nil {
			return err
		}
		s, err := p.SavePrefs(r.Context(), uid, up)
		return ok(w, s, err)
	})
	user("GET /v1/users/{uid}/mailbox", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		st, err := p.Mailbox(r.Context(), uid)
		return ok(w, st, err)
	})
	user("PUT /v1/users/{uid}/mailbox", func(w http.ResponseWriter, r *http.Request, uid string, body []byte) error {
		var in portal.MailboxSettings
		if err := decodeRequest(body, &in); err != nil {
			return err
		}
		st, err := p.ConnectMailbox(r.Context(), uid, in)
		return ok(w, st, err)
	})
	user("POST /v1/users/{uid}/mailbox/test", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		st, err := p.TestMailbox(r.Context(), uid)
		return ok(w, st, err)
	})
	user("DELETE /v1/users/{uid}/mailbox", func(w http.ResponseWriter, r *http.Request, uid string, _ []byte) error {
		st, err := p.DisconnectMailbox(r.Context(), uid)
		return ok(w, st, err)
	})

	a.mux.HandleFunc("GET /v1/admin/health", a.signed(func(w http.ResponseWriter, r *http.Request, _ []byte) error {
		h, err := p.Health(r.Context())
		return ok(w, h, err)
	}))
	a.mux.HandleFunc("GET /v1/admin/settings", a.signed(func(w http.ResponseWriter, r *http.Request, _ []byte) error {
		s, err := p.AdminSettings()
		return ok(w, s, err)
	}))
	a.mux.HandleFunc("PUT /v1/admin/settings", a.signed(func(w http.ResponseWriter, r *http.Request, body []byte) error {
		s, err := p.SaveAdminSettings(r.Context(), body)
		return ok(w, s, err)
	}))
}

// decodeRequest decodes a JSON body (an empty body is an empty object).
func decodeRequest(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := decodeStrict(body, v); err != nil {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: err.(*Error).Message}
	}
	return nil
}

// decodePrefs reads PUT …/settings; calendars may be the list of hrefs or the object
// GET returns ({"enabled": […]}), so a page can send its form back as it got it.
func decodePrefs(body []byte) (portal.PrefsUpdate, error) {
	var in struct {
		portal.PrefsUpdate
		Calendars json.RawMessage `json:"calendars"`
	}
	if err := decodeRequest(body, &in); err != nil {
		return portal.PrefsUpdate{}, err
	}
	up := in.PrefsUpdate
	if raw := bytes.TrimSpace(in.Calendars); len(raw) > 0 && string(raw) != "null" {
		var list []string
		if raw[0] == '{' {
			var obj struct {
				Enabled []string `json:"enabled"`
			}
			if err := json.Unmarshal(raw, &obj); err != nil {
				return portal.PrefsUpdate{}, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "calendars must be a list of calendar hrefs"}
			}
			list = obj.Enabled
		} else if err := json.Unmarshal(raw, &list); err != nil {
			return portal.PrefsUpdate{}, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: "calendars must be a list of calendar hrefs"}
		}
		if list == nil {
			list = []string{}
		}
		up.Calendars = &list
	}
	return up, nil
}

func pathID(r *http.Request, name string) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		return 0, &Error{Status: http.StatusNotFound, Code: "not_found", Message: name + " is not a known id"}
	}
	return id, nil
}

func queryInt(r *http.Request, name string, def int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, &Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: name + " must be a whole number"}
	}
	return n, nil
}

// portalError maps a portal refusal to its status and stable code.
func portalError(e *portal.Error) (int, string) {
	switch e.Kind {
	case portal.KindInvalid:
		return http.StatusBadRequest, "invalid_request"
	case portal.KindNotAllowed:
		return http.StatusForbidden, "not_allowed"
	case portal.KindNotFound:
		return http.StatusNotFound, "not_found"
	case portal.KindConflict:
		return http.StatusConflict, "conflict"
	case portal.KindInvalidSettings:
		return http.StatusUnprocessableEntity, "invalid_settings"
	case portal.KindUnavailable:
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusInternalServerError, "internal"
}
