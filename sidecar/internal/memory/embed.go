package memory

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Embedder turns texts into vectors. Memory uses it, when one is configured, to add
// similarity search to keyword search; without one (or while it fails) search is
// keyword-only.
type Embedder interface {
	// Model names the vectors' model; vectors of another model are never compared.
	Model() string
	// Embed returns one vector per text, in order, all of one dimension.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// HTTPEmbedderConfig configures an OpenAI-compatible embeddings endpoint.
type HTTPEmbedderConfig struct {
	// URL is the endpoint's base URL. "/v1/embeddings" is appended, or only
	// "/embeddings" when URL already ends in "/v1"; a URL that already ends in
	// "/embeddings" is used as it is.
	URL    string
	Model  string
	APIKey string // sent as a bearer token when not empty; never logged
	// Client defaults to one with a 30 s timeout.
	Client *http.Client
}

// HTTPEmbedder calls an OpenAI-compatible POST …/v1/embeddings endpoint.
type HTTPEmbedder struct {
	endpoint string
	model    string
	key      string
	client   *http.Client
}

// maxEmbeddingResponse bounds the response body: a batch of 64 vectors of 3072
// dimensions is about 4 MiB of JSON.
const maxEmbeddingResponse = 64 << 20

// NewHTTPEmbedder checks cfg and returns an embedder for it.
func NewHTTPEmbedder(cfg HTTPEmbedderConfig) (*HTTPEmbedder, error) {
	u, err := url.Parse(strings.TrimSpace(cfg.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("memory: embeddings URL must be an http(s) URL")
	}
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("memory: embeddings model is required")
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/embeddings"):
	case strings.HasSuffix(p, "/v1"):
		p += "/embeddings"
	default:
		p += "/v1/embeddings"
	}
	u.Path, u.RawPath = p, ""
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	return &HTTPEmbedder{endpoint: u.String(), model: cfg.Model, key: cfg.APIKey, client: client}, nil
}

// Model is the configured model name.
func (e *HTTPEmbedder) Model() string { return e.model }

// Embed posts texts in one request.
func (e *HTTPEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	body, err := json.Marshal(struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}{e.model, texts})
	if err != nil {
		return nil, fmt.Errorf("embeddings: encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("embeddings: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if e.key != "" {
		req.Header.Set("Authorization", "Bearer "+e.key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("embeddings: %s", e.redact(err.Error()))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxEmbeddingResponse+1))
	if err != nil {
		return nil, fmt.Errorf("embeddings: read response: %s", e.redact(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("embeddings: HTTP %d: %s", resp.StatusCode, e.redact(excerpt(string(raw), 200)))
	}
	if len(raw) > maxEmbeddingResponse {
		return nil, errors.New("embeddings: response too large")
	}
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("embeddings: decode response: %w", err)
	}
	if len(out.Data) != len(texts) {
		return nil, fmt.Errorf("embeddings: asked for %d vectors, got %d", len(texts), len(out.Data))
	}
	vecs := make([][]float32, len(texts))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(texts) || vecs[d.Index] != nil {
			return nil, fmt.Errorf("embeddings: bad or repeated index %d", d.Index)
		}
		if len(d.Embedding) == 0 || len(d.Embedding) != len(out.Data[0].Embedding) {
			return nil, errors.New("embeddings: vectors are empty or of different dimensions")
		}
		vecs[d.Index] = d.Embedding
	}
	return vecs, nil
}

// redact keeps the API key out of error messages, should a proxy or server echo it.
func (e *HTTPEmbedder) redact(s string) string {
	if e.key == "" {
		return s
	}
	return strings.ReplaceAll(s, e.key, "[redacted]")
}

// excerpt shortens s to at most n runes, on one line.
func excerpt(s string, n int) string {
	s = normalize(s)
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n]) + "…"
}

// unitVector scales v to length 1 so that similarity is a dot product; ok is false for
// a zero or non-finite vector, which cannot be compared.
func unitVector(v []float32) (out []float32, ok bool) {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 || math.IsNaN(sum) || math.IsInf(sum, 0) {
		return nil, false
	}
	inv := 1 / math.Sqrt(sum)
	out = make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, true
}

// encodeVector stores v as little-endian float32s (the column's documented layout).
func encodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// decodeVector reads what encodeVector wrote; ok is false for a blob of the wrong size.
func decodeVector(b []byte) (v []float32, ok bool) {
	if len(b) == 0 || len(b)%4 != 0 {
		return nil, false
	}
	v = make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, true
}

// dotEncoded is the dot product of q with an encoded vector of the same dimension,
// read in place: the vector scan touches every stored vector and must not allocate.
func dotEncoded(q []float32, b []byte) (float64, bool) {
	if len(b) != 4*len(q) {
		return 0, false
	}
	var sum float32
	for i, x := range q {
		sum += x * math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return float64(sum), true
}
