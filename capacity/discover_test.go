package capacity

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// route is one fake endpoint: a status and a body, a testdata file, or a
// handler that hangs until the client gives up.
type route struct {
	status int    // 0: 200
	body   string // used when file is empty
	file   string // testdata/<file>
	ctype  string // Content-Type; default application/json
	hang   bool
}

// fakeServer serves routes; every other path is a 404, as on a real server
// of another kind. It records the requests' Authorization headers.
func fakeServer(t *testing.T, routes map[string]route) *httptest.Server {
	t.Helper()
	bodies := map[string][]byte{}
	for p, r := range routes {
		if r.file == "" {
			bodies[p] = []byte(r.body)
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", r.file))
		if err != nil {
			t.Fatal(err)
		}
		bodies[p] = b
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r, ok := routes[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		if r.hang {
			<-req.Context().Done()
			return
		}
		w.Header().Set("Content-Type", or(r.ctype, "application/json"))
		w.WriteHeader(or(r.status, http.StatusOK))
		_, _ = w.Write(bodies[req.URL.Path])
	}))
	t.Cleanup(srv.Close)
	return srv
}

// or is the standard library's cmp.Or, which this file cannot import under
// that name beside go-cmp.
func or[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

func TestDiscoverServers(t *testing.T) {
	tests := []struct {
		name   string
		routes map[string]route
		suffix string // appended to the server URL as the base URL
		want   Capacity
	}{
		{
			name: "llama.cpp 4 slots of 512",
			routes: map[string]route{
				"/props":     {file: "llamacpp_props.json"},
				"/v1/models": {file: "llamacpp_models.json"},
			},
			want: Capacity{
				Slots:   Limit{4, "llama.cpp /props total_slots"},
				Context: Limit{512, "llama.cpp /props default_generation_settings.n_ctx"},
			},
		},
		{
			name:   "llama.cpp base URL with /v1/",
			routes: map[string]route{"/props": {file: "llamacpp_props.json"}},
			suffix: "/v1/",
			want: Capacity{
				Slots:   Limit{4, "llama.cpp /props total_slots"},
				Context: Limit{512, "llama.cpp /props default_generation_settings.n_ctx"},
			},
		},
		{
			name:   "llama.cpp build with a top-level n_ctx for the whole cache",
			routes: map[string]route{"/props": {file: "llamacpp_props_total_nctx.json"}},
			want: Capacity{
				Slots:   Limit{4, "llama.cpp /props total_slots"},
				Context: Limit{512, "llama.cpp /props n_ctx / total_slots"},
			},
		},
		{
			name:   "vLLM max_model_len 2048",
			routes: map[string]route{"/v1/models": {file: "vllm_models.json"}},
			want:   Capacity{Context: Limit{2048, "vLLM /v1/models max_model_len"}},
		},
		{
			name: "SGLang",
			routes: map[string]route{
				"/get_server_info": {file: "sglang_server_info.json"},
				"/v1/models":       {file: "sglang_models.json"},
			},
			want: Capacity{
				Slots:     Limit{128, "SGLang /get_server_info internal_states[].effective_max_running_requests_per_dp"},
				Context:   Limit{32768, "SGLang /v1/models max_model_len"},
				MaxPrompt: Limit{20474, "SGLang /get_server_info max_req_input_len"},
				KVTokens:  Limit{20480, "SGLang /get_server_info max_total_num_tokens"},
			},
		},
		{
			name:   "SGLang with only the renamed /server_info",
			routes: map[string]route{"/server_info": {file: "sglang_server_info.json"}},
			want: Capacity{
				Slots:     Limit{128, "SGLang /server_info internal_states[].effective_max_running_requests_per_dp"},
				MaxPrompt: Limit{20474, "SGLang /server_info max_req_input_len"},
				KVTokens:  Limit{20480, "SGLang /server_info max_total_num_tokens"},
			},
		},
		{
			name: "SGLang with two data-parallel ranks and context_length set",
			routes: map[string]route{"/get_server_info": {body: `{"context_length": 8192, "max_running_requests": 999, "max_total_num_tokens": 100000,
				"internal_states": [{"effective_max_running_requests_per_dp": 64}, {"effective_max_running_requests_per_dp": 64}]}`}},
			want: Capacity{
				Slots:    Limit{128, "SGLang /get_server_info internal_states[].effective_max_running_requests_per_dp (sum of 2 ranks)"},
				Context:  Limit{8192, "SGLang /get_server_info context_length"},
				KVTokens: Limit{100000, "SGLang /get_server_info max_total_num_tokens"},
			},
		},
		{
			name:   "SGLang release without internal_states limits",
			routes: map[string]route{"/get_server_info": {body: `{"max_running_requests": 48, "max_total_num_tokens": 100000, "internal_states": [{"last_gen_throughput": 1.0}]}`}},
			want: Capacity{
				Slots:    Limit{48, "SGLang /get_server_info max_running_requests"},
				KVTokens: Limit{100000, "SGLang /get_server_info max_total_num_tokens"},
			},
		},
		{
			name:   "TGI 3",
			routes: map[string]route{"/info": {file: "tgi_info.json"}},
			want: Capacity{
				Slots:     Limit{128, "TGI /info max_concurrent_requests"},
				Context:   Limit{4096, "TGI /info max_total_tokens"},
				MaxPrompt: Limit{4095, "TGI /info max_input_tokens"},
			},
		},
		{
			name:   "TGI 1",
			routes: map[string]route{"/info": {file: "tgi_info_v1.json"}},
			want: Capacity{
				Slots:     Limit{128, "TGI /info max_concurrent_requests"},
				Context:   Limit{2048, "TGI /info max_total_tokens"},
				MaxPrompt: Limit{1024, "TGI /info max_input_length"},
				KVTokens:  Limit{32000, "TGI /info max_batch_total_tokens"},
			},
		},
		{
			name:   "TGI with max_batch_size below max_concurrent_requests",
			routes: map[string]route{"/info": {body: `{"max_concurrent_requests": 128, "max_batch_size": 8, "max_total_tokens": 4096}`}},
			want: Capacity{
				Slots:   Limit{8, "TGI /info max_batch_size"},
				Context: Limit{4096, "TGI /info max_total_tokens"},
			},
		},
		{
			name: "two servers answer: the smaller limit wins",
			routes: map[string]route{
				"/props":     {file: "llamacpp_props.json"},
				"/v1/models": {body: `{"data": [{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": 256}]}`},
			},
			want: Capacity{
				Slots:   Limit{4, "llama.cpp /props total_slots"},
				Context: Limit{256, "/v1/models max_model_len"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeServer(t, tt.routes)
			got, warnings := Discover(context.Background(), HTTPGetter{Client: srv.Client()}, srv.URL+tt.suffix, Capacity{})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("capacity (-want +got):\n%s", diff)
			}
			if len(warnings) != 0 {
				t.Errorf("warnings: %q", warnings)
			}
		})
	}
}

func TestDiscoverBadAnswers(t *testing.T) {
	huge := `{"total_slots": 4, "pad": "` + strings.Repeat("x", 2<<20) + `"}`
	html := `<!doctype html><html><body>It works!</body></html>`
	tests := []struct {
		name     string
		routes   map[string]route
		want     Capacity
		warnings []string
	}{
		{
			name:     "404 everywhere",
			warnings: []string{"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server"},
		},
		{
			name: "HTML everywhere",
			routes: map[string]route{
				"/props": {body: html, ctype: "text/html"}, "/v1/models": {body: html, ctype: "text/html"},
				"/get_server_info": {body: html, ctype: "text/html"}, "/info": {body: html, ctype: "text/html"},
			},
			warnings: []string{
				"server capacity: /props, /v1/models, /get_server_info, /info answered with something other than JSON (a web page?); ignored",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name:   "garbage and truncated JSON",
			routes: map[string]route{"/props": {body: "\x00\x01garbage"}, "/info": {body: `{"max_total_tokens": 40`}},
			warnings: []string{
				"server capacity: /props, /info answered with something other than JSON (a web page?); ignored",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name:   "other JSON shapes are not this server",
			routes: map[string]route{"/props": {body: `[1, 2]`}, "/info": {body: `{"name": "some other service"}`}, "/v1/models": {body: `{"object": "model", "id": "tgi"}`}},
			warnings: []string{
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name:   "huge body",
			routes: map[string]route{"/props": {body: huge}, "/v1/models": {file: "vllm_models.json"}},
			want:   Capacity{Context: Limit{2048, "vLLM /v1/models max_model_len"}},
			warnings: []string{
				"server capacity: GET /props answered more than 1024 KiB; ignored",
			},
		},
		{
			name:   "server error while loading",
			routes: map[string]route{"/props": {status: http.StatusServiceUnavailable, body: `{"error": {"code": 503, "message": "Loading model"}}`}},
			warnings: []string{
				"server capacity: GET /props answered HTTP 503 Service Unavailable; ignored",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name:   "zero and negative",
			routes: map[string]route{"/props": {body: `{"total_slots": 0, "default_generation_settings": {"n_ctx": -1}}`}},
			warnings: []string{
				"llama.cpp /props: total_slots 0 ignored (want 1..100000)",
				"llama.cpp /props: default_generation_settings.n_ctx -1 ignored (want 16..10000000)",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name:   "1e12 and a fraction",
			routes: map[string]route{"/props": {body: `{"total_slots": 1e12, "default_generation_settings": {"n_ctx": 511.5}}`}},
			warnings: []string{
				"llama.cpp /props: total_slots 1e12 ignored (want 1..100000)",
				"llama.cpp /props: default_generation_settings.n_ctx 511.5 ignored (not a whole number)",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name:   "strings, booleans and objects",
			routes: map[string]route{"/props": {body: `{"total_slots": "4", "default_generation_settings": {"n_ctx": true}}`}, "/info": {body: `{"max_concurrent_requests": {"n": 1}, "max_total_tokens": 4096}`}},
			want:   Capacity{Context: Limit{4096, "TGI /info max_total_tokens"}},
			warnings: []string{
				`llama.cpp /props: total_slots "4" ignored (not a number)`,
				"llama.cpp /props: default_generation_settings.n_ctx true ignored (not a number)",
				`TGI /info: max_concurrent_requests {"n": 1} ignored (not a number)`,
			},
		},
		{
			name:   "props without the numbers",
			routes: map[string]route{"/props": {body: `{"default_generation_settings": "none"}`}},
			warnings: []string{
				"llama.cpp /props: no total_slots; the server's slot count is unknown",
				"llama.cpp /props: default_generation_settings is not an object; ignored",
				"llama.cpp /props: no n_ctx in default_generation_settings; the context per request is unknown",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
		{
			name: "absurd SGLang and TGI values",
			routes: map[string]route{
				"/get_server_info": {body: `{"max_total_num_tokens": -5, "context_length": 1e300, "internal_states": {"x": 1}, "max_running_requests": 0}`},
				"/info":            {body: `{"max_concurrent_requests": 128, "max_total_tokens": 4, "max_input_tokens": "many", "max_batch_total_tokens": 1e11}`},
			},
			want: Capacity{Slots: Limit{128, "TGI /info max_concurrent_requests"}},
			warnings: []string{
				"SGLang /get_server_info: max_total_num_tokens -5 ignored (want 16..10000000000)",
				"SGLang /get_server_info: context_length 1e300 ignored (want 16..10000000)",
				"SGLang /get_server_info: internal_states is not a list of objects; ignored",
				"SGLang /get_server_info: max_running_requests 0 ignored (want 1..100000)",
				"TGI /info: max_total_tokens 4 ignored (want 16..10000000)",
				"TGI /info: max_batch_total_tokens 1e11 ignored (want 16..10000000000)",
				`TGI /info: max_input_tokens "many" ignored (not a number)`,
			},
		},
		{
			name:   "the same bad value on every model is said once",
			routes: map[string]route{"/v1/models": {body: `{"data": [{"id": "a", "max_model_len": 0}, {"id": "b", "max_model_len": 0}]}`}},
			warnings: []string{
				"/v1/models: max_model_len 0 ignored (want 16..10000000)",
				"server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := fakeServer(t, tt.routes)
			got, warnings := Discover(context.Background(), HTTPGetter{Client: srv.Client()}, srv.URL, Capacity{})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("capacity (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.warnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscoverHangingServer(t *testing.T) {
	routes := map[string]route{"/props": {hang: true}, "/v1/models": {file: "vllm_models.json"}}

	t.Run("per-endpoint timeout", func(t *testing.T) {
		srv := fakeServer(t, routes)
		start := time.Now()
		got, warnings := discover(context.Background(), HTTPGetter{Client: srv.Client()}, srv.URL, Capacity{}, 100*time.Millisecond)
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("took %v", el)
		}
		if want := (Capacity{Context: Limit{2048, "vLLM /v1/models max_model_len"}}); got != want {
			t.Errorf("capacity %+v, want %+v", got, want)
		}
		want := []string{"server capacity: GET /props did not answer within 100ms; ignored"}
		if diff := cmp.Diff(want, warnings); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
	})

	t.Run("the caller's context ends it", func(t *testing.T) {
		srv := fakeServer(t, routes)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, warnings := Discover(ctx, HTTPGetter{Client: srv.Client()}, srv.URL, Capacity{})
		if el := time.Since(start); el > 2*time.Second {
			t.Errorf("took %v", el)
		}
		if !containsPrefix(warnings, "server capacity: discovery cut short") {
			t.Errorf("warnings %q: want the discovery cut short", warnings)
		}
	})
}

// stuckGetter never answers, whatever its context says.
type stuckGetter struct{ release chan struct{} }

func (g stuckGetter) Get(context.Context, string, int64) (int, []byte, error) {
	<-g.release
	return 0, nil, errors.New("released")
}

func TestDiscoverGetterIgnoringContext(t *testing.T) {
	g := stuckGetter{release: make(chan struct{})}
	defer close(g.release)

	start := time.Now()
	got, warnings := discover(context.Background(), g, "http://x", Capacity{}, 50*time.Millisecond)
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v", el)
	}
	if got.Known() {
		t.Errorf("capacity %+v, want unknown", got)
	}
	if want := []string{"server capacity: some endpoints did not answer in time"}; !cmp.Equal(want, warnings) {
		t.Errorf("warnings %q, want %q", warnings, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	_, warnings = Discover(ctx, g, "http://x", Capacity{})
	if el := time.Since(start); el > time.Second {
		t.Errorf("cancelled: took %v", el)
	}
	if !containsPrefix(warnings, "server capacity: discovery cut short (context canceled)") {
		t.Errorf("cancelled: warnings %q", warnings)
	}
}

func TestDiscoverUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()

	got, warnings := Discover(context.Background(), HTTPGetter{}, url, Capacity{})
	if got.Known() {
		t.Errorf("capacity %+v, want unknown", got)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "server capacity unknown: no answer from "+url+" (") {
		t.Errorf("warnings %q", warnings)
	}
}

func containsPrefix(lines []string, prefix string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

func TestHTTPGetter(t *testing.T) {
	var gotAuth, gotAccept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotAccept = r.Header.Get("Authorization"), r.Header.Get("Accept")
		_, _ = w.Write([]byte(strings.Repeat("a", 100)))
	}))
	defer srv.Close()
	g := HTTPGetter{Client: srv.Client(), Header: http.Header{"Authorization": {"Bearer k"}}}

	status, body, err := g.Get(context.Background(), srv.URL, 100)
	if err != nil || status != http.StatusOK || len(body) != 100 {
		t.Fatalf("Get = %d, %d bytes, %v", status, len(body), err)
	}
	if gotAuth != "Bearer k" || gotAccept != "application/json" {
		t.Errorf("headers: Authorization %q, Accept %q", gotAuth, gotAccept)
	}
	if _, _, err := g.Get(context.Background(), srv.URL, 99); !errors.Is(err, ErrBodyTooLarge) {
		t.Errorf("over the cap: err %v, want ErrBodyTooLarge", err)
	}
	if _, _, err := g.Get(context.Background(), "http://[::1", 10); err == nil {
		t.Error("bad URL: no error")
	}
}

// What the caller learnt elsewhere (the /metrics hints) is merged in: a
// server whose endpoints publish nothing is not "capacity unknown" then.
func TestDiscoverMergesKnownHints(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	known := Capacity{KVTokens: Limit{N: 1024, Source: "vLLM /metrics"}}
	got, warnings := Discover(context.Background(), HTTPGetter{Client: srv.Client()}, srv.URL, known)
	if got.KVTokens != known.KVTokens {
		t.Errorf("KV tokens %+v, want the hint", got.KVTokens)
	}
	for _, w := range warnings {
		if strings.Contains(w, "capacity unknown") {
			t.Errorf("warned %q though the hints are known", w)
		}
	}
}
