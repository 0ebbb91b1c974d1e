package davshare

import "testing"

func TestParseWritable(t *testing.T) {
	const head = `<?xml version="1.0"?><d:multistatus xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns" xmlns:s="http://sabredav.org/ns"><d:response><d:href>/remote.php/dav/calendars/istota/x_shared_by_alice/</d:href>`
	const tail = `</d:response></d:multistatus>`
	for _, tc := range []struct {
		name            string
		body            string
		writable, known bool
	}{
		{"nextcloud read-only share", head + `<d:propstat><d:prop><d:current-user-privilege-set><d:privilege><d:read/></d:privilege><d:privilege><d:read-acl/></d:privilege><d:privilege><d:read-current-user-privilege-set/></d:privilege></d:current-user-privilege-set><oc:read-only>1</oc:read-only></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>` + tail, false, true},
		{"nextcloud read-write share", head + `<d:propstat><d:prop><d:current-user-privilege-set><d:privilege><d:read/></d:privilege><d:privilege><d:write/></d:privilege><d:privilege><d:write-properties/></d:privilege></d:current-user-privilege-set><oc:read-only>0</oc:read-only></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>` + tail, true, true},
		{"privileges only", head + `<d:propstat><d:prop><d:current-user-privilege-set><d:privilege><d:bind/></d:privilege></d:current-user-privilege-set></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat><d:propstat><d:prop><oc:read-only/></d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>` + tail, true, true},
		{"read-only flag only", head + `<d:propstat><d:prop><oc:read-only>true</oc:read-only></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>` + tail, false, true},
		{"neither (left to the write)", head + `<d:propstat><d:prop><d:current-user-privilege-set/><oc:read-only/></d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>` + tail, false, false},
	} {
		w, k, err := ParseWritable([]byte(tc.body))
		if err != nil || w != tc.writable || k != tc.known {
			t.Errorf("%s: writable %t known %t err %v", tc.name, w, k, err)
		}
	}
	if _, _, err := ParseWritable([]byte("<not xml")); err == nil {
		t.Error("garbage parsed")
	}
}
