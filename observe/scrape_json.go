package observe

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tokentop/tokentop/prom"
)

// scrapeJSON is a Scrape as recordings hold it.
type scrapeJSON struct {
	At     time.Time `json:"at"`
	Sample *sample   `json:"sample,omitempty"`
	Err    string    `json:"err,omitempty"`
}

// MarshalJSON writes histogram bounds as strings, since JSON has no +Inf.
func (s *Scrape) MarshalJSON() ([]byte, error) {
	return json.Marshal(scrapeJSON{At: s.At, Sample: fromSample(s.Sample), Err: s.Err})
}

// UnmarshalJSON reads what MarshalJSON wrote and checks it as the
// aggregator needs it: finite signals, ascending cumulative buckets ending
// at +Inf, and either a sample or an error.
func (s *Scrape) UnmarshalJSON(b []byte) error {
	var j scrapeJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	smp, err := j.Sample.toSample()
	if err != nil {
		return err
	}
	if smp == nil && j.Err == "" {
		return errors.New("a scrape with neither a sample nor an error")
	}
	*s = Scrape{At: j.At, Sample: smp, Err: j.Err}
	return nil
}

// sample is prom.Sample in JSON; histogram bounds are strings because JSON
// has no +Inf.
type sample struct {
	At         time.Time            `json:"at"`
	Profile    string               `json:"profile"`
	Variant    string               `json:"variant,omitempty"`
	Models     []string             `json:"models,omitempty"`
	Model      string               `json:"model,omitempty"`
	PerModel   map[string]*sample   `json:"per_model,omitempty"`
	Signals    map[string]*float64  `json:"signals,omitempty"`
	Histograms map[string]histogram `json:"histograms,omitempty"`
	Warnings   []string             `json:"warnings,omitempty"`
}

type histogram struct {
	Count   float64     `json:"count"`
	Sum     float64     `json:"sum"`
	NoSum   bool        `json:"no_sum,omitempty"`
	Buckets [][2]string `json:"buckets"` // [le, cumulative count]
}

func fromSample(s *prom.Sample) *sample {
	if s == nil {
		return nil
	}
	out := &sample{At: s.At, Profile: s.Profile, Variant: s.Variant, Models: s.Models, Model: s.Model,
		Signals: s.Signals, Warnings: s.Warnings}
	if len(s.PerModel) > 0 {
		out.PerModel = make(map[string]*sample, len(s.PerModel))
		for m, ps := range s.PerModel {
			out.PerModel[m] = fromSample(ps)
		}
	}
	if len(s.Histograms) > 0 {
		out.Histograms = make(map[string]histogram, len(s.Histograms))
		for name, h := range s.Histograms {
			rh := histogram{Count: h.Count, Sum: h.Sum, NoSum: h.NoSum, Buckets: make([][2]string, len(h.Buckets))}
			for i, b := range h.Buckets {
				rh.Buckets[i] = [2]string{formatFloat(b.UpperBound), formatFloat(b.CumulativeCount)}
			}
			out.Histograms[name] = rh
		}
	}
	return out
}

func (s *sample) toSample() (*prom.Sample, error) {
	if s == nil {
		return nil, nil
	}
	out := &prom.Sample{At: s.At, Profile: s.Profile, Variant: s.Variant, Models: s.Models, Model: s.Model,
		Signals: s.Signals, Warnings: s.Warnings}
	for name, v := range s.Signals {
		if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
			return nil, fmt.Errorf("signal %s is not finite", name)
		}
	}
	if len(s.PerModel) > 0 {
		out.PerModel = make(map[string]*prom.Sample, len(s.PerModel))
		for m, ps := range s.PerModel {
			p, err := ps.toSample()
			if err != nil {
				return nil, fmt.Errorf("model %s: %w", m, err)
			}
			out.PerModel[m] = p
		}
	}
	if len(s.Histograms) > 0 {
		out.Histograms = make(map[string]prom.Histogram, len(s.Histograms))
		for name, rh := range s.Histograms {
			h := prom.Histogram{Count: rh.Count, Sum: rh.Sum, NoSum: rh.NoSum, Buckets: make([]prom.Bucket, len(rh.Buckets))}
			for i, b := range rh.Buckets {
				le, err1 := strconv.ParseFloat(b[0], 64)
				c, err2 := strconv.ParseFloat(b[1], 64)
				if err := errors.Join(err1, err2); err != nil {
					return nil, fmt.Errorf("histogram %s bucket %d: %w", name, i, err)
				}
				if i > 0 && (le <= h.Buckets[i-1].UpperBound || c < h.Buckets[i-1].CumulativeCount) {
					return nil, fmt.Errorf("histogram %s: buckets not ascending and cumulative", name)
				}
				h.Buckets[i] = prom.Bucket{UpperBound: le, CumulativeCount: c}
			}
			if n := len(h.Buckets); n == 0 || !math.IsInf(h.Buckets[n-1].UpperBound, 1) {
				return nil, fmt.Errorf("histogram %s: last bucket is not +Inf", name)
			}
			out.Histograms[name] = h
		}
	}
	return out, nil
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
