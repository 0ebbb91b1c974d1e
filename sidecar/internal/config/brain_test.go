package config

import (
	"strings"
	"testing"
)

// TestBrainKinds checks what each brain kind needs: claude a CLI path, openai a model
// and an OpenAI-compatible endpoint without credentials in the URL.
func TestBrainKinds(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		env        []string
		wantErr    string // "" means valid
	}{
		{"claude by default", "", nil, ""},
		{"claude without a CLI path", "[brain]\nclaude_path = \"\"\n", nil, "brain.claude_path"},
		{"openai", "[brain]\nkind = \"openai\"\nmodel = \"gpt-4.1\"\napi_base_url = \"https://api.openai.com/v1\"\n", nil, ""},
		{"openai from the environment", "", []string{"ISTOTA_BRAIN=openai", "ISTOTA_MODEL=llama3", "ISTOTA_API_BASE_URL=http://127.0.0.1:11434/v1"}, ""},
		{"openai without a model", "[brain]\nkind = \"openai\"\napi_base_url = \"https://api.openai.com/v1\"\n", nil, "brain.model"},
		{"openai against Anthropic's API", "[brain]\nkind = \"openai\"\nmodel = \"gpt-4.1\"\n", nil, "brain.api_base_url"},
		{"openai with credentials in the URL", "[brain]\nkind = \"openai\"\nmodel = \"m\"\napi_base_url = \"https://u:p@llm.example.com/v1\"\n", nil, "brain.api_base_url"},
		{"unknown kind names both", "[brain]\nkind = \"gemini\"\n", nil, "supported: claude, openai"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeFile(t, t.TempDir(), "c.toml", c.toml), c.env)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("got %v, want an error naming %q", err, c.wantErr)
			}
		})
	}
}
