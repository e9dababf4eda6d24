package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokentop/tokentop/report"
)

// nginxConf fronts upstream with a real nginx. buffered chooses between
// nginx's default proxy_buffering (plus gzip of the event stream, a common
// production setting) and the configuration advised for streaming.
const nginxConf = `
daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen 127.0.0.1:%[2]d;
    location / {
      proxy_pass http://%[3]s;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      %[4]s
    }
  }
}
`

const (
	nginxBuffered  = "proxy_buffering on; gzip on; gzip_types text/event-stream; gzip_min_length 0;"
	nginxStreaming = "proxy_buffering off; gzip off;"
)

// startNginx runs nginx in the foreground in front of upstream and returns
// its base URL.
func startNginx(t *testing.T, upstream, directives string) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
			if _, err := os.Stat(p); err == nil {
				bin = p
			}
		}
	}
	if bin == "" {
		t.Skip("nginx not installed (.ci/run installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	host := strings.TrimPrefix(upstream, "http://")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConf, dir, port, host, directives)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("nginx: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; i < 50; i++ {
		resp, err := http.Get(base + "/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
	t.Fatalf("nginx did not come up: %s\n%s", out.String(), logs)
	return ""
}

// TestRealNginxBuffering points `tokentop watch` at the simulator directly
// and through a real nginx: buffered nginx must be diagnosed as
// proxy_buffering, nginx configured for streaming must not.
func TestRealNginxBuffering(t *testing.T) {
	t.Parallel()
	d := scenarioDuration(t)
	for _, tc := range []struct {
		name       string
		directives string
		want       bool
	}{
		{"buffering and gzip", nginxBuffered, true},
		{"configured for streaming", nginxStreaming, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stack := startScenarioSim(t, ctx, "healthy")
			gw := startNginx(t, stack.target, tc.directives)

			out := filepath.Join(t.TempDir(), "report.json")
			var stdout, stderr bytes.Buffer
			args := []string{"watch", "--target", stack.target, "--gateway", gw, "--headless", "--duration", d.String(), "--report", out}
			code := run(ctx, testEnv(&stdout, &stderr), args)
			if code != report.ExitOK && code != report.ExitSLOFailed {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var r reportView
			if err := json.Unmarshal(data, &r); err != nil {
				t.Fatal(err)
			}
			fired := firstServerFinding(r) == "proxy_buffering"
			any := false
			for _, f := range r.Findings {
				any = any || f.Rule == "proxy_buffering"
			}
			if tc.want && !fired {
				t.Errorf("findings %v: want proxy_buffering first through a buffering nginx", rules(r))
			}
			if !tc.want && any {
				t.Errorf("proxy_buffering fired through nginx configured for streaming: %v", rules(r))
			}
		})
	}
}

// TestRealNginxGzipBeforeAServerWithoutMetrics: the default classes, 20 s,
// through a real nginx gzipping the event stream in front of a server
// written here, with a known timing (first token after 250 ms, 20 chunks
// 25 ms apart) and no /metrics. The few gateway
// streams are delivered in bursts: proxy_buffering is named first, and the
// gateway's delay is not blamed on batch work.
func TestRealNginxGzipBeforeAServerWithoutMetrics(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 20 s live run")
	}
	target := (&fakeLLM{stream: twentyChunks}).start(t)
	gw := startNginx(t, target, nginxBuffered)
	var r reportView
	watchReport(t, 20*time.Second, &r, "--target", target, "--gateway", gw)
	if first := firstServerFinding(r); first != "proxy_buffering" {
		t.Errorf("findings %v: want proxy_buffering first through a gzipping nginx", rules(r))
	}
	for _, f := range r.Findings {
		if f.Rule == "batch_interference" {
			t.Errorf("batch_interference for the gateway path's delay: %v", rules(r))
		}
	}
}

// twentyChunks answers every completion with its own SSE writer: the first
// chunk after 250 ms, then 19 more 25 ms apart, whatever max_tokens asks.
func twentyChunks(w http.ResponseWriter, r *http.Request, _ fakeRequest) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	time.Sleep(250 * time.Millisecond)
	for i := range 20 {
		if i > 0 {
			time.Sleep(25 * time.Millisecond)
		}
		if r.Context().Err() != nil {
			return true
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"text\":\"w%d \"}]}\n\n", i, i)
		fl.Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	fl.Flush()
	return true
}
