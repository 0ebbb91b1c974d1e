package webdav

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Depths of ListLevel.
const (
	DepthSelf     = "0"
	DepthMembers  = "1"
	DepthInfinity = "infinity"
)

// maxMultistatusBytes bounds one PROPFIND answer (200,000 entries of about 1 KiB).
const maxMultistatusBytes = 256 << 20

// propfindBody asks for exactly what a sync needs.
const propfindBody = `<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns"><d:prop><d:resourcetype/><d:getetag/><d:getcontentlength/><d:getlastmodified/><oc:fileid/></d:prop></d:propfind>`

// ListLevel runs one PROPFIND at depth ("0", "1" or "infinity") and returns every
// entry of the answer, the folder itself included, with the ETags of folders too
// (go-webdav's client leaves them out). Nextcloud changes a folder's ETag whenever
// anything below it changes, so one depth-0 request tells whether a whole tree
// changed, and depth-1 requests walk only into the folders that did. Paths are as in
// FileInfo: root-relative and not cleaned.
func (c *Client) ListLevel(ctx context.Context, name, depth string) ([]FileInfo, error) {
	rel, err := clean(name)
	if err != nil {
		return nil, err
	}
	if depth != DepthSelf && depth != DepthMembers && depth != DepthInfinity {
		return nil, fmt.Errorf("webdav: depth %q", depth)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	target := c.fileURL(rel)
	if rel != "" {
		target += "/"
	}
	req, err := http.NewRequestWithContext(ctx, "PROPFIND", target, strings.NewReader(propfindBody))
	if err != nil {
		return nil, fmt.Errorf("webdav PROPFIND %s: %w", rel, err)
	}
	req.Header.Set("Depth", depth)
	req.Header.Set("Content-Type", "application/xml; charset=utf-8")
	resp, err := c.send(req)
	if err != nil {
		return nil, transportError(ctx, "PROPFIND", rel, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusMultiStatus {
		if resp.StatusCode/100 == 2 {
			return nil, &Error{Op: "PROPFIND", Path: rel, Status: resp.StatusCode, cause: fmt.Errorf("answered %s instead of 207 Multi-Status", resp.Status)}
		}
		return nil, statusError("PROPFIND", rel, resp)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxMultistatusBytes+1))
	if err != nil {
		return nil, transportError(ctx, "PROPFIND", rel, err)
	}
	if len(raw) > maxMultistatusBytes {
		return nil, &Error{Op: "PROPFIND", Path: rel, cause: fmt.Errorf("answer larger than %d bytes", maxMultistatusBytes)}
	}
	out, err := c.parseMultistatus(raw)
	if err != nil {
		return nil, &Error{Op: "PROPFIND", Path: rel, cause: err}
	}
	if len(out) > maxListEntries {
		return nil, &Error{Op: "PROPFIND", Path: rel, cause: fmt.Errorf("more than %d entries", maxListEntries)}
	}
	return out, nil
}

type multistatus struct {
	Responses []struct {
		Href      string `xml:"DAV: href"`
		Propstats []struct {
			Status string `xml:"DAV: status"`
			Prop   struct {
				ResourceType struct {
					Collection *struct{} `xml:"DAV: collection"`
				} `xml:"DAV: resourcetype"`
				ETag          string `xml:"DAV: getetag"`
				ContentLength string `xml:"DAV: getcontentlength"`
				LastModified  string `xml:"DAV: getlastmodified"`
				FileID        string `xml:"http://owncloud.org/ns fileid"`
			} `xml:"DAV: prop"`
		} `xml:"DAV: propstat"`
	} `xml:"DAV: response"`
}

func (c *Client) parseMultistatus(raw []byte) ([]FileInfo, error) {
	var ms multistatus
	dec := xml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&ms); err != nil {
		return nil, fmt.Errorf("multistatus: %w", err)
	}
	out := make([]FileInfo, 0, len(ms.Responses))
	for _, r := range ms.Responses {
		u, err := url.Parse(strings.TrimSpace(r.Href))
		if err != nil || r.Href == "" {
			return nil, fmt.Errorf("multistatus: bad href %q", clip(r.Href, 100))
		}
		fi := FileInfo{Path: c.rel(u.Path)}
		for _, ps := range r.Propstats {
			if !strings.Contains(ps.Status, " 200") {
				continue // the 404 propstat of properties a resource does not have
			}
			p := ps.Prop
			if p.ResourceType.Collection != nil {
				fi.IsDir = true
			}
			if p.ETag != "" {
				fi.ETag = parseETag(p.ETag)
			}
			if n, err := parseLength(p.ContentLength); err == nil {
				fi.Size = n
			}
			if t, err := http.ParseTime(strings.TrimSpace(p.LastModified)); err == nil {
				fi.ModTime = t
			}
			if n, err := strconv.ParseInt(strings.TrimSpace(p.FileID), 10, 64); err == nil && n > 0 {
				fi.FileID = n
			}
		}
		if fi.IsDir {
			fi.Size = 0
		}
		out = append(out, fi)
	}
	return out, nil
}

func parseLength(s string) (int64, error) {
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}
