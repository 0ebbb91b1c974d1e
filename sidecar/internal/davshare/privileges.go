package davshare

import (
	"encoding/xml"
	"fmt"
	"strings"
)

// PrivilegesQuery is the PROPFIND body that asks a collection whether the requester
// may change it: the standard current-user-privilege-set (RFC 3744) and Nextcloud's
// own read-only flag on shared collections.
const PrivilegesQuery = `<?xml version="1.0" encoding="utf-8"?>
<d:propfind xmlns:d="DAV:" xmlns:o="http://owncloud.org/ns"><d:prop><d:current-user-privilege-set/><o:read-only/></d:prop></d:propfind>`

type multistatus struct {
	Responses []struct {
		Propstats []struct {
			Status string `xml:"DAV: status"`
			Prop   struct {
				Privileges *struct {
					Privilege []struct {
						Inner []struct {
							XMLName xml.Name
						} `xml:",any"`
					} `xml:"DAV: privilege"`
				} `xml:"DAV: current-user-privilege-set"`
				ReadOnly *string `xml:"http://owncloud.org/ns read-only"`
			} `xml:"DAV: prop"`
		} `xml:"DAV: propstat"`
	} `xml:"DAV: response"`
}

// ParseWritable reads the answer to PrivilegesQuery: writable says whether the
// requester may add and change objects in the collection, known whether the server
// said (a server that answers neither property leaves it to the write itself).
func ParseWritable(body []byte) (writable, known bool, err error) {
	var ms multistatus
	if err := xml.Unmarshal(body, &ms); err != nil {
		return false, false, fmt.Errorf("davshare: parse privileges: %w", err)
	}
	for _, r := range ms.Responses {
		for _, ps := range r.Propstats {
			if !strings.Contains(ps.Status, " 200") {
				continue
			}
			if ro := ps.Prop.ReadOnly; ro != nil {
				v := strings.TrimSpace(*ro)
				if v == "1" || strings.EqualFold(v, "true") {
					return false, true, nil
				}
			}
			if ps.Prop.Privileges != nil {
				for _, p := range ps.Prop.Privileges.Privilege {
					for _, in := range p.Inner {
						if in.XMLName.Space == "DAV:" {
							switch in.XMLName.Local {
							case "all", "write", "write-content", "bind":
								return true, true, nil
							}
						}
					}
				}
				return false, true, nil
			}
		}
	}
	return false, false, nil
}
