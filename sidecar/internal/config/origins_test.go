package config

import (
	"errors"
	"testing"
)

func TestPublicOrigins(t *testing.T) {
	for _, tc := range []struct {
		origins []string
		ok      bool
	}{
		{nil, true},
		{[]string{"https://cloud.example.com", "http://10.0.0.5:8080"}, true},
		{[]string{"cloud.example.com"}, false},
		{[]string{"https://cloud.example.com/index.php"}, false},
		{[]string{"ftp://cloud.example.com"}, false},
	} {
		c := Default()
		c.Server.PublicOrigins = tc.origins
		err := c.Validate()
		var fe *FieldError
		if tc.ok && err != nil {
			t.Errorf("%v: %v", tc.origins, err)
		}
		if !tc.ok && (!errors.As(err, &fe) || fe.Field != "server.public_origins") {
			t.Errorf("%v: got %v, want a server.public_origins error", tc.origins, err)
		}
	}
}
