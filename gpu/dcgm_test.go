package gpu

import (
	"context"
	"errors"
	"github.com/tokentop/tokentop/observe"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseDCGM(t *testing.T) {
	const t4MiB = 15109
	tests := []struct {
		file string
		want []observe.GPUDevice
	}{
		{
			file: "dcgm-exporter-2.x-datadog-T4-block1.txt",
			want: []observe.GPUDevice{{
				Index: 0, Name: "Tesla T4", UUID: "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e",
				Util:          new(0.0),
				MemUsedBytes:  new(uint64(0)),
				MemTotalBytes: new(uint64(t4MiB * 1024 * 1024)), // used 0 + free 15109, no reserved field
				MemBWUtil:     new(0.0),                         // MEM_COPY_UTIL 0; no DRAM_ACTIVE
				SMClockMHz:    new(uint32(300)),
				PowerW:        new(8.969),
				TempC:         new(uint32(25)),
			}},
		},
		{
			file: "dcgm-exporter-datadog-T4-block2-empty-help.txt",
			want: []observe.GPUDevice{{
				// modelName and DCGM_FI_DEV_NAME labels agree; modelName wins.
				Index: 0, Name: "Tesla T4", UUID: "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5",
				MemTotalBytes: new(uint64(t4MiB * 1024 * 1024)), // FB_TOTAL
				PowerLimitW:   new(70.0),                        // POWER_MGMT_LIMIT
			}},
		},
		{
			// The "..." line is skipped; MEMORY_TEMP's blank is not a field we map.
			file: "dcgm-exporter-README-PARTIAL.txt",
			want: []observe.GPUDevice{{
				Index: 0, UUID: "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
				SMClockMHz: new(uint32(139)),
			}},
		},
		{
			file: "dcgm-constructed-h100x2-mig.txt",
			want: []observe.GPUDevice{
				{
					Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-3f0c9a12-5b7e-4c1d-9e2a-7d41c0b8a001",
					Util:              new(0.97),
					MemUsedBytes:      new(uint64(75776 * 1024 * 1024)),
					MemTotalBytes:     new(uint64((75776 + 5263 + 520) * 1024 * 1024)), // 81559 MiB
					MemBWUtil:         new(0.632451),                                   // DRAM_ACTIVE over COPY_UTIL's 41%
					SMActivity:        new(0.825),
					SMClockMHz:        new(uint32(1755)),
					PowerW:            new(688.412),
					TempC:             new(uint32(71)),
					ClockEventReasons: new(uint64(12)),
					ClockEventWords:   []string{"sw_power_cap", "hw_slowdown"},
				},
				{
					// MIG: instance series only mark the device; COPY_UTIL is blank.
					Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-3f0c9a12-5b7e-4c1d-9e2a-7d41c0b8a002",
					MIG:               true,
					SMClockMHz:        new(uint32(1980)),
					PowerW:            new(120.5),
					TempC:             new(uint32(40)),
					ClockEventReasons: new(uint64(1)),
					ClockEventWords:   []string{"gpu_idle"},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ParseDCGM(f)
			if err != nil {
				t.Fatalf("ParseDCGM: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d devices, want %d", len(got), len(tt.want))
			}
			for i := range tt.want {
				assertDevice(t, got[i], tt.want[i])
			}
		})
	}
}

func TestParseDCGMRejectsNonDCGM(t *testing.T) {
	tests := map[string]string{
		"empty":    "",
		"vllm":     "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n",
		"no label": "DCGM_FI_DEV_GPU_UTIL{UUID=\"GPU-x\"} 50\n",
		"garbage":  "<html>not metrics</html>\n",
	}
	for name, body := range tests {
		if devs, err := ParseDCGM(strings.NewReader(body)); err == nil {
			t.Errorf("%s: ParseDCGM = %+v, want an error", name, devs)
		}
	}
}

func TestDCGMSampler(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "dcgm-constructed-h100x2-mig.txt"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Accept"); got != "text/plain;version=0.0.4" {
			t.Errorf("Accept = %q", got)
		}
		switch r.URL.Path {
		case "/metrics":
			w.Write(body)
		case "/hang":
			<-r.Context().Done()
		default:
			http.Error(w, "nope", http.StatusNotFound)
		}
	}))
	defer srv.Close()

	got := NewDCGMSampler(srv.URL+"/metrics", srv.Client()).Sample(context.Background())
	if got.Err != nil || got.Source != SourceDCGM || got.At.IsZero() || len(got.Devices) != 2 {
		t.Fatalf("sample = %+v", got)
	}
	if d := got.Devices[0]; d.Util == nil || *d.Util != 0.97 {
		t.Errorf("device 0 util = %v, want 0.97", d.Util)
	}

	if got := NewDCGMSampler(srv.URL+"/missing", nil).Sample(context.Background()); got.Err == nil ||
		!strings.Contains(got.Err.Error(), "404") || got.Devices != nil {
		t.Errorf("404: sample = %+v, want an error naming the status", got)
	}

	hang := NewDCGMSampler(srv.URL+"/hang", nil)
	hang.timeout = 50 * time.Millisecond
	start := time.Now()
	if got := hang.Sample(context.Background()); !errors.Is(got.Err, context.DeadlineExceeded) {
		t.Errorf("hanging exporter: Err = %v, want DeadlineExceeded", got.Err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("hanging exporter took %v", el)
	}

	down := httptest.NewServer(http.NotFoundHandler())
	url := down.URL
	down.Close()
	if got := NewDCGMSampler(url, nil).Sample(context.Background()); got.Err == nil {
		t.Error("closed server: want an error")
	}
}

// A dcgm-exporter URL with a password never reaches the sample's error:
// neither in tokentop's own words nor in net/http's.
func TestDCGMErrorsHoldNoPassword(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	withAuth := strings.Replace(srv.URL, "http://", "http://dcgm:hunter2secret@", 1)
	closed := "http://dcgm:hunter2secret@127.0.0.1:1/metrics"
	for _, u := range []string{withAuth + "/metrics", closed} {
		got := NewDCGMSampler(u, nil).Sample(context.Background())
		if got.Err == nil {
			t.Fatalf("%s: no error", u)
		}
		if strings.Contains(got.Err.Error(), "hunter2secret") {
			t.Errorf("the password in the error: %v", got.Err)
		}
	}
}
