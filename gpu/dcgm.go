package gpu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tokentop/tokentop/observe"
	"github.com/tokentop/tokentop/sanitize"
	"github.com/tokentop/tokentop/scrape"
)

// dcgmTimeout bounds one scrape of the exporter when the caller's client has
// no timeout of its own; a reading that takes longer shows as stale in Run.
const dcgmTimeout = 5 * time.Second

// dcgmBlank is DCGM_INT32_BLANK (0x7ffffff0). DCGM reports "blank" and "not
// supported" as sentinels at or above the type's blank value (int32, int64
// and fp64 blanks are all larger than this one); no real device field comes
// near it.
const dcgmBlank = 0x7ffffff0

const mib = 1 << 20

// DCGMSampler reads device signals from a dcgm-exporter /metrics endpoint,
// for hosts where tokentop has no NVML access.
type DCGMSampler struct {
	url     string
	client  *http.Client
	timeout time.Duration
}

// NewDCGMSampler returns a sampler of the dcgm-exporter endpoint url (for
// example http://host:9400/metrics). A nil client means http.DefaultClient;
// each request is bounded by the client's Timeout or, without one, 5 s.
func NewDCGMSampler(url string, client *http.Client) *DCGMSampler {
	if client == nil {
		client = http.DefaultClient
	}
	return &DCGMSampler{url: url, client: client, timeout: dcgmTimeout}
}

// Sample scrapes the exporter once. Transport, status and parse failures land
// in Sample.Err with no devices.
func (d *DCGMSampler) Sample(ctx context.Context) Sample {
	devs, err := d.scrape(ctx)
	return Sample{At: time.Now(), Source: SourceDCGM, Devices: devs, Err: err}
}

func (d *DCGMSampler) scrape(ctx context.Context) ([]observe.GPUDevice, error) {
	if d.client.Timeout == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.url, nil)
	if err != nil {
		return nil, fmt.Errorf("dcgm: %w", err)
	}
	// Ask for the classic text format: it is what ParseDCGM reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := d.client.Do(req)
	if err != nil {
		// net/http quotes the URL, userinfo and all.
		return nil, fmt.Errorf("dcgm: %w", sanitize.Error(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("dcgm: GET %s: %s", sanitize.URL(d.url), sanitize.Bounded(resp.Status, 80))
	}
	devs, err := ParseDCGM(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("dcgm: GET %s: %w", sanitize.URL(d.url), err)
	}
	return devs, nil
}

// ParseDCGM reads a dcgm-exporter text exposition into one Device per GPU,
// ordered by the gpu label. Units follow the DCGM field definitions:
// utilisations in percent (PROF_* fields are already 0..1), framebuffer in
// MiB, clocks in MHz, power in W, temperature in C. Blank and "not
// supported" sentinels become nil, as do fields the exporter does not
// export; per-process memory is never available through DCGM. Series of a
// MIG instance (GPU_I_ID label) only mark the device as MIG: they describe a
// slice, not the device. It fails when the body cannot be read or holds no
// usable DCGM_FI_ series.
func ParseDCGM(r io.Reader) ([]observe.GPUDevice, error) {
	// The scrapers' parser, with its bounds: an exporter is a server like
	// any other and may send anything. Its names and label values (GPU
	// names, UUIDs) come out sanitized (sanitize.Text), as every scrape's.
	e, err := scrape.ParseExposition(r, 0)
	if err != nil {
		return nil, fmt.Errorf("parse dcgm metrics: %w", err)
	}
	acc := make(map[int]*dcgmDevice)
	seen := false
	for name, series := range e.Series {
		if !strings.HasPrefix(name, "DCGM_FI_") {
			continue
		}
		seen = true
		for _, s := range series {
			idx, err := strconv.Atoi(s.Labels["gpu"])
			if err != nil || idx < 0 {
				continue
			}
			dev := acc[idx]
			if dev == nil {
				dev = &dcgmDevice{values: make(map[string]float64)}
				acc[idx] = dev
			}
			dev.labels(s.Labels)
			if s.Labels["GPU_I_ID"] != "" {
				dev.mig = true
				continue
			}
			if _, dup := dev.values[name]; dup || !dcgmValid(s.Value) {
				continue
			}
			dev.values[name] = s.Value
		}
	}
	if !seen {
		return nil, errors.New("no DCGM_FI_ series: not a dcgm-exporter endpoint?")
	}
	if len(acc) == 0 {
		return nil, errors.New("no DCGM_FI_ series carries a gpu label")
	}
	devs := make([]observe.GPUDevice, 0, len(acc))
	for _, idx := range slices.Sorted(maps.Keys(acc)) {
		devs = append(devs, acc[idx].device(idx))
	}
	return devs, nil
}

type dcgmDevice struct {
	uuid, modelName, fieldName, node string
	mig                              bool
	values                           map[string]float64
}

func (d *dcgmDevice) labels(l map[string]string) {
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	set(&d.uuid, l["UUID"])
	set(&d.modelName, l["modelName"])
	set(&d.fieldName, l["DCGM_FI_DEV_NAME"])
	set(&d.node, l["device"])
}

func dcgmValid(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 && v < dcgmBlank
}

// get returns the first of the named fields the exporter sent.
func (d *dcgmDevice) get(names ...string) *float64 {
	for _, n := range names {
		if v, ok := d.values[n]; ok {
			return new(v)
		}
	}
	return nil
}

// percent turns a DCGM percentage into a 0..1 ratio.
func percent(v *float64) *float64 {
	if v == nil {
		return nil
	}
	return new(*v / 100)
}

func mibToBytes(v *float64) *uint64 {
	if v == nil {
		return nil
	}
	return new(uint64(math.Round(*v * mib)))
}

func toUint32(v *float64) *uint32 {
	if v == nil || *v > math.MaxUint32 {
		return nil
	}
	return new(uint32(math.Round(*v)))
}

func (d *dcgmDevice) device(idx int) observe.GPUDevice {
	out := observe.GPUDevice{Index: idx, UUID: d.uuid, MIG: d.mig}
	// The device label is the node name (nvidia0): a last resort.
	for _, n := range []string{d.modelName, d.fieldName, d.node} {
		if n != "" {
			out.Name = n
			break
		}
	}
	out.Util = percent(d.get("DCGM_FI_DEV_GPU_UTIL"))
	out.MemUsedBytes = mibToBytes(d.get("DCGM_FI_DEV_FB_USED"))
	out.MemTotalBytes = mibToBytes(d.get("DCGM_FI_DEV_FB_TOTAL"))
	if out.MemTotalBytes == nil {
		// FB_TOTAL is not in the exporter's default field list; newer
		// drivers split reserved memory out of used and free.
		used, free := d.get("DCGM_FI_DEV_FB_USED"), d.get("DCGM_FI_DEV_FB_FREE")
		if used != nil && free != nil {
			total := *used + *free
			if res := d.get("DCGM_FI_DEV_FB_RESERVED"); res != nil {
				total += *res
			}
			out.MemTotalBytes = mibToBytes(&total)
		}
	}
	// DRAM_ACTIVE is the profiler's measure of bandwidth use, and closer to
	// what limits decode than MEM_COPY_UTIL's controller busy time.
	out.MemBWUtil = d.get("DCGM_FI_PROF_DRAM_ACTIVE")
	if out.MemBWUtil == nil {
		out.MemBWUtil = percent(d.get("DCGM_FI_DEV_MEM_COPY_UTIL"))
	}
	out.SMActivity = d.get("DCGM_FI_PROF_SM_ACTIVE")
	out.SMClockMHz = toUint32(d.get("DCGM_FI_DEV_SM_CLOCK"))
	out.SMClockMaxMHz = toUint32(d.get("DCGM_FI_DEV_MAX_SM_CLOCK"))
	out.PowerW = d.get("DCGM_FI_DEV_POWER_USAGE")
	out.PowerLimitW = d.get("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT")
	out.TempC = toUint32(d.get("DCGM_FI_DEV_GPU_TEMP"))
	if v := d.get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"); v != nil {
		mask := uint64(*v)
		out.ClockEventReasons = new(mask)
		out.ClockEventWords = DecodeClockEventReasons(mask)
	}
	return out
}
