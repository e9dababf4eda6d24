package capacity

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tokentop/tokentop/sanitize"
)

// Getter fetches one URL. The caller's HTTP client implements it, so the
// questions asked here carry the same API key, TLS settings and proxy as the
// probe's own requests (probe.Client.Get). It returns the status and at
// most maxBytes (> 0) of body, or an error wrapping ErrBodyTooLarge when the
// body is longer: Get does both, and every Getter is Get on its client.
type Getter interface {
	Get(ctx context.Context, url string, maxBytes int64) (status int, body []byte, err error)
}

// ErrBodyTooLarge is returned by a Getter when a body exceeds its cap.
var ErrBodyTooLarge = errors.New("response body too large")

// Get is the capped GET behind every Getter: it asks c for url with
// header (its keys in canonical form) and reads at most maxBytes (> 0) of
// the body; a longer body is an error wrapping ErrBodyTooLarge. Errors
// quote url without its userinfo.
func Get(ctx context.Context, c *http.Client, url string, header http.Header, maxBytes int64) (int, []byte, error) {
	where := sanitize.URL(url)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", where, sanitize.Error(err))
	}
	maps.Copy(req.Header, header)
	resp, err := c.Do(req)
	if err != nil {
		// A *url.Error already names the method and URL, with its user.
		return 0, nil, sanitize.Error(err)
	}
	defer resp.Body.Close()
	// One byte past the cap tells a body of exactly maxBytes from a longer
	// one without reading the rest of a huge answer.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: reading body: %w", where, err)
	}
	if int64(len(body)) > maxBytes {
		return resp.StatusCode, nil, fmt.Errorf("GET %s: over %d bytes: %w", where, maxBytes, ErrBodyTooLarge)
	}
	return resp.StatusCode, body, nil
}

// HTTPGetter is a Getter on a plain *http.Client, for tests and for callers
// without a client of their own.
type HTTPGetter struct {
	Client *http.Client // nil: http.DefaultClient
	Header http.Header  // added to every request, e.g. Authorization
}

// Get implements Getter: JSON is asked for unless Header says otherwise.
func (g HTTPGetter) Get(ctx context.Context, url string, maxBytes int64) (int, []byte, error) {
	h := http.Header{}
	for k, vs := range g.Header {
		for _, v := range vs {
			h.Add(k, v) // in canonical form
		}
	}
	if h.Get("Accept") == "" {
		h.Set("Accept", "application/json")
	}
	return Get(ctx, cmp.Or(g.Client, http.DefaultClient), url, h, maxBytes)
}

const (
	// endpointTimeout bounds each question: these endpoints answer from
	// memory in milliseconds, and a server slower than this is one the run
	// should start probing rather than wait on.
	endpointTimeout = 3 * time.Second
	// maxBody caps an answer: SGLang's server info, the largest of them,
	// is tens of kilobytes.
	maxBody int64 = 1 << 20
)

// endpoint is one question to the server and how to read its answer.
type endpoint struct {
	// paths are tried in order; the next only after a 404 or 405, for a
	// server that renamed the endpoint.
	paths []string
	// parse reads a 2xx JSON answer from path. ok is false when the answer
	// does not have this server's shape (another server's /info, say), so
	// it is ignored without a warning.
	parse func(path string, body []byte, n *notes) (c Capacity, ok bool)
}

func endpoints() []endpoint {
	return []endpoint{
		{paths: []string{"/props"}, parse: parseLlamaProps},
		{paths: []string{"/v1/models"}, parse: parseModels},
		// SGLang renamed /get_server_info to /server_info; older releases
		// only have the first.
		{paths: []string{"/get_server_info", "/server_info"}, parse: parseSGLangInfo},
		{paths: []string{"/info"}, parse: parseTGIInfo},
	}
}

// answer is what one endpoint returned.
type answer struct {
	index  int
	path   string
	status int
	body   []byte
	err    error
}

// Discover asks the server at baseURL (with or without the /v1 suffix) what
// it can run at once and how long a request may be. It never fails: what it
// cannot learn stays unknown, and the returned lines say why, for the user.
// The questions are asked concurrently, each with a short timeout, and ctx
// ends them all. known is what the caller already learnt elsewhere (the
// /metrics hints of FromMetrics): merged in, so the server is said to
// publish nothing only when neither source did.
func Discover(ctx context.Context, get Getter, baseURL string, known Capacity) (Capacity, []string) {
	return discover(ctx, get, baseURL, known, endpointTimeout)
}

func discover(ctx context.Context, get Getter, baseURL string, known Capacity, timeout time.Duration) (Capacity, []string) {
	root := strings.TrimSuffix(strings.TrimRight(baseURL, "/"), "/v1")
	eps := endpoints()
	// Buffered, so an endpoint that answers after Discover returned (a
	// Getter that ignores its context) does not block forever.
	ch := make(chan answer, len(eps))
	for i, ep := range eps {
		go func() { ch <- fetch(ctx, get, root, i, ep, timeout) }()
	}
	// Every endpoint runs its paths in turn, so the slowest may take one
	// timeout per path; this deadline holds even for a Getter that ignores
	// its context.
	deadline := time.NewTimer(time.Duration(maxPaths(eps))*timeout + time.Second)
	defer deadline.Stop()
	answers := make([]*answer, len(eps))
	var cut string
wait:
	for range eps {
		select {
		case a := <-ch:
			answers[a.index] = &a
		case <-ctx.Done():
			cut = fmt.Sprintf("server capacity: discovery cut short (%v)", context.Cause(ctx))
			break wait
		case <-deadline.C:
			cut = "server capacity: some endpoints did not answer in time"
			break wait
		}
	}
	return combine(root, eps, answers, cut, known, timeout)
}

func maxPaths(eps []endpoint) int {
	n := 1
	for _, ep := range eps {
		n = max(n, len(ep.paths))
	}
	return n
}

func fetch(ctx context.Context, get Getter, root string, index int, ep endpoint, timeout time.Duration) answer {
	var a answer
	for _, p := range ep.paths {
		a = answer{index: index, path: p}
		c, cancel := context.WithTimeout(ctx, timeout)
		a.status, a.body, a.err = get.Get(c, root+p, maxBody)
		cancel()
		if a.err != nil || (a.status != http.StatusNotFound && a.status != http.StatusMethodNotAllowed) {
			break
		}
	}
	return a
}

// combine reads the answers in endpoint order, so the result and its
// warnings do not depend on which server answered first.
func combine(root string, eps []endpoint, answers []*answer, cut string, known Capacity, timeout time.Duration) (Capacity, []string) {
	var (
		c        Capacity
		n        notes
		nonJSON  []string
		failures []string
		firstErr error
	)
	for i, a := range answers {
		switch {
		case a == nil:
			failures = append(failures, eps[i].paths[0])
		case a.err != nil:
			switch {
			case errors.Is(a.err, ErrBodyTooLarge):
				n.warnf("server capacity: GET %s answered more than %d KiB; ignored", a.path, maxBody>>10)
			case errors.Is(a.err, context.DeadlineExceeded) && cut == "":
				n.warnf("server capacity: GET %s did not answer within %v; ignored", a.path, timeout)
			default:
				failures = append(failures, a.path)
				if firstErr == nil {
					firstErr = a.err
				}
			}
		case a.status == http.StatusNotFound || a.status == http.StatusMethodNotAllowed:
			// Not this kind of server: the usual answer, nothing to say.
		case a.status < 200 || a.status > 299:
			n.warnf("server capacity: GET %s answered HTTP %d %s; ignored", a.path, a.status, http.StatusText(a.status))
		case !json.Valid(a.body):
			nonJSON = append(nonJSON, a.path)
		default:
			if got, ok := eps[i].parse(a.path, a.body, &n); ok {
				c = c.Merge(got)
			}
		}
	}
	if len(nonJSON) > 0 {
		n.warnf("server capacity: %s answered with something other than JSON (a web page?); ignored", strings.Join(nonJSON, ", "))
	}
	if cut != "" {
		n.warnf("%s", cut)
	}
	c = c.Merge(known)
	if !c.Known() {
		switch {
		case len(failures) == len(eps) && firstErr != nil:
			n.warnf("server capacity unknown: no answer from %s (%v); probe load not sized to the server", root, firstErr)
		case cut == "":
			n.warnf("server capacity unknown: the server publishes none of llama.cpp /props, /v1/models max_model_len, SGLang /get_server_info, TGI /info; probe load not sized to the server")
		}
	}
	return c, dedupe(n.warnings)
}

// dedupe drops repeated warnings (a /v1/models listing ten adapters with the
// same bad value), keeping the first of each in order.
func dedupe(ws []string) []string {
	var out []string
	for _, w := range ws {
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// object decodes a JSON object into its raw fields; ok is false for any
// other JSON value.
func object(raw []byte) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, false
	}
	return m, true
}

// parseLlamaProps reads llama.cpp's GET /props. total_slots is --parallel.
// default_generation_settings is slot 0's state, and its n_ctx is that
// slot's context: n_ctx / n_parallel in every release, or the whole n_ctx
// with a unified KV cache (--kv-unified, the default with -np auto), where
// the slots then share it. There is no n_ctx_slot field (that name is only
// in the server's log). Builds that also publish a top-level n_ctx mean the
// whole context.
func parseLlamaProps(path string, body []byte, n *notes) (Capacity, bool) {
	p, ok := object(body)
	if !ok {
		return Capacity{}, false
	}
	dgsRaw, hasDGS := p["default_generation_settings"]
	slotsRaw, hasSlots := p["total_slots"]
	if !hasDGS && !hasSlots {
		return Capacity{}, false
	}
	src := "llama.cpp " + path
	var c Capacity
	if hasSlots {
		c.Slots = n.limit(slotsRaw, src, "total_slots", minSlots, maxSlots)
	} else {
		n.warnf("%s: no total_slots; the server's slot count is unknown", src)
	}
	dgs, dgsOK := object(dgsRaw)
	if hasDGS && !dgsOK {
		n.warnf("%s: default_generation_settings is not an object; ignored", src)
	}
	if raw, ok := dgs["n_ctx"]; ok {
		c.Context = n.limit(raw, src, "default_generation_settings.n_ctx", minContext, maxContext)
		return c, true
	}
	raw, ok := p["n_ctx"]
	if !ok {
		n.warnf("%s: no n_ctx in default_generation_settings; the context per request is unknown", src)
		return c, true
	}
	total, ok := n.number(raw, src, "n_ctx")
	if !ok {
		return c, true
	}
	field := "n_ctx"
	if c.Slots.Known() {
		// Without a unified cache each slot gets its share; with one, the
		// share is what each can count on while the others are busy.
		total = math.Floor(total / float64(c.Slots.N))
		field = "n_ctx / total_slots"
	}
	c.Context = n.bounded(total, strings.TrimSpace(string(raw)), src, field, minContext, maxContext)
	return c, true
}

// parseModels reads GET /v1/models. vLLM (and SGLang) give each model its
// max_model_len, the prompt plus output limit per request; other servers
// leave it out, and their answer is ignored.
func parseModels(path string, body []byte, n *notes) (Capacity, bool) {
	var m struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return Capacity{}, false
	}
	var c Capacity
	found := false
	for _, d := range m.Data {
		raw, ok := d["max_model_len"]
		if !ok {
			continue
		}
		found = true
		src := path
		var owner string
		if json.Unmarshal(d["owned_by"], &owner) == nil {
			switch strings.ToLower(owner) {
			case "vllm":
				src = "vLLM " + path
			case "sglang":
				src = "SGLang " + path
			}
		}
		// Several models behind one endpoint (LoRA adapters, a router):
		// which one a class asks for is not known here, so the shortest
		// limit is the safe one.
		c.Context = c.Context.min(n.limit(raw, src, "max_model_len", minContext, maxContext))
	}
	return c, found
}

// parseSGLangInfo reads SGLang's GET /get_server_info (or /server_info):
// the server arguments (context_length, max_running_requests: null when not
// set), the scheduler's max_total_num_tokens (the KV pool) and
// max_req_input_len, and per data-parallel rank the
// effective_max_running_requests_per_dp the scheduler settled on.
func parseSGLangInfo(path string, body []byte, n *notes) (Capacity, bool) {
	p, ok := object(body)
	if !ok {
		return Capacity{}, false
	}
	_, hasKV := p["max_total_num_tokens"]
	statesRaw, hasStates := p["internal_states"]
	if !hasKV && !hasStates {
		return Capacity{}, false
	}
	src := "SGLang " + path
	c := Capacity{
		KVTokens:  n.limit(p["max_total_num_tokens"], src, "max_total_num_tokens", minKVTokens, maxKVTokens),
		Context:   n.limit(p["context_length"], src, "context_length", minContext, maxContext),
		MaxPrompt: n.limit(p["max_req_input_len"], src, "max_req_input_len", minContext, maxContext),
	}
	c.Slots = sglangSlots(statesRaw, src, n)
	if !c.Slots.Known() {
		c.Slots = n.limit(p["max_running_requests"], src, "max_running_requests", minSlots, maxSlots)
	}
	return c, true
}

// sglangSlots adds up the running-request limit of every data-parallel
// rank; unknown if any rank's is missing or bad, since a partial sum would
// claim less than the server has and a guess would claim more.
func sglangSlots(raw json.RawMessage, src string, n *notes) Limit {
	if len(raw) == 0 || string(raw) == "null" {
		return Limit{}
	}
	var states []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &states); err != nil {
		n.warnf("%s: internal_states is not a list of objects; ignored", src)
		return Limit{}
	}
	const field = "effective_max_running_requests_per_dp"
	total := 0
	for _, st := range states {
		l := n.limit(st[field], src, "internal_states[]."+field, minSlots, maxSlots)
		if !l.Known() {
			return Limit{}
		}
		total += l.N
	}
	if total == 0 || total > maxSlots {
		return Limit{}
	}
	f := "internal_states[]." + field
	if len(states) > 1 {
		f = fmt.Sprintf("%s (sum of %d ranks)", f, len(states))
	}
	return Limit{N: total, Source: src + " " + f}
}

// parseTGIInfo reads TGI's GET /info: max_concurrent_requests (the router
// turns requests beyond it away), max_total_tokens (prompt plus output per
// request), max_input_tokens (max_input_length before TGI 2.0), and, in
// releases that publish them, max_batch_size and max_batch_total_tokens.
func parseTGIInfo(path string, body []byte, n *notes) (Capacity, bool) {
	p, ok := object(body)
	if !ok {
		return Capacity{}, false
	}
	_, hasTotal := p["max_total_tokens"]
	_, hasConc := p["max_concurrent_requests"]
	if !hasTotal && !hasConc {
		return Capacity{}, false
	}
	src := "TGI " + path
	c := Capacity{
		Slots:    n.limit(p["max_concurrent_requests"], src, "max_concurrent_requests", minSlots, maxSlots),
		Context:  n.limit(p["max_total_tokens"], src, "max_total_tokens", minContext, maxContext),
		KVTokens: n.limit(p["max_batch_total_tokens"], src, "max_batch_total_tokens", minKVTokens, maxKVTokens),
	}
	c.Slots = c.Slots.min(n.limit(p["max_batch_size"], src, "max_batch_size", minSlots, maxSlots))
	if raw, ok := p["max_input_tokens"]; ok {
		c.MaxPrompt = n.limit(raw, src, "max_input_tokens", minContext, maxContext)
	} else {
		c.MaxPrompt = n.limit(p["max_input_length"], src, "max_input_length", minContext, maxContext)
	}
	return c, true
}
