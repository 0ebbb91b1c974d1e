package userconfig

import (
	"bytes"
	"fmt"

	"github.com/BurntSushi/toml"
)

// cronJobTOML is how RenderCron writes a job: the keys ParseCron reads, empty ones left out.
type cronJobTOML struct {
	Name               string `toml:"name"`
	Schedule           string `toml:"schedule"`
	TZ                 string `toml:"timezone,omitempty"`
	Prompt             string `toml:"prompt,omitempty"`
	Command            string `toml:"command,omitempty"`
	Conversation       string `toml:"conversation,omitempty"`
	Email              string `toml:"email,omitempty"`
	SilentUnlessAction bool   `toml:"silent_unless_action,omitempty"`
	Enabled            *bool  `toml:"enabled,omitempty"`
}

// RenderCron writes jobs as a CRON.md that ParseCron reads back to the same jobs: a
// short explanation and one toml block. It gives back a user's file that went missing
// while their jobs were still stored.
func RenderCron(jobs []Job) ([]byte, error) {
	doc := struct {
		Jobs []cronJobTOML `toml:"jobs"`
	}{}
	for _, j := range jobs {
		tj := cronJobTOML{Name: j.Name, Schedule: j.Schedule, TZ: j.TZ, Prompt: j.Prompt, Command: j.Command,
			Conversation: j.Target.Conversation, Email: j.Target.Email, SilentUnlessAction: j.SilentUnlessAction}
		if !j.Enabled {
			off := false
			tj.Enabled = &off
		}
		doc.Jobs = append(doc.Jobs, tj)
	}
	var body bytes.Buffer
	if err := toml.NewEncoder(&body).Encode(doc); err != nil {
		return nil, fmt.Errorf("userconfig: render CRON.md: %w", err)
	}
	var out bytes.Buffer
	out.WriteString("<!--\nCRON.md: jobs the assistant runs for you on a schedule. This file had gone missing,\n" +
		"so it was written again from the jobs that were still scheduled. Edit it freely;\n" +
		"deleting it (or a job in it) stops those jobs. \"!cron\" in Talk lists them.\n-->\n\n```toml\n")
	out.Write(body.Bytes())
	out.WriteString("```\n")
	return out.Bytes(), nil
}
