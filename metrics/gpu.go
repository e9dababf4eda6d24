package metrics

import (
	"maps"
	"math"
	"slices"

	"github.com/DataDog/sketches-go/ddsketch/mapping"

	"github.com/tokentop/tokentop/observe"
)

// gpuAccum accumulates GPU samples over one slot (or the run).
type gpuAccum struct {
	m       mapping.IndexMapping
	devices map[int]*gpuDeviceAccum
}

type gpuDeviceAccum struct {
	name            string
	util, bw, power *sketch
	memFracMax      float64
	hasMem          bool
	words           map[string]bool
}

func newGPUAccum(c *spanConfig) accumulator {
	return &gpuAccum{m: c.mapping, devices: map[int]*gpuDeviceAccum{}}
}

func (g *gpuAccum) device(idx int) *gpuDeviceAccum {
	d := g.devices[idx]
	if d == nil {
		d = &gpuDeviceAccum{util: newSketch(g.m), bw: newSketch(g.m), power: newSketch(g.m), words: map[string]bool{}}
		g.devices[idx] = d
	}
	return d
}

// apply accounts a GPU sample the aggregator kept (one with devices).
func (g *gpuAccum) apply(ev spanEvent) {
	s, ok := ev.(*observe.GPUSample)
	if !ok {
		return
	}
	for i := range s.Devices {
		dev := &s.Devices[i]
		d := g.device(dev.Index)
		d.name = dev.Name
		if dev.Util != nil {
			d.util.add(*dev.Util)
		}
		if dev.MemBWUtil != nil {
			d.bw.add(*dev.MemBWUtil)
		}
		if dev.PowerW != nil {
			d.power.add(*dev.PowerW)
		}
		if dev.MemUsedBytes != nil && dev.MemTotalBytes != nil && *dev.MemTotalBytes > 0 {
			f := float64(*dev.MemUsedBytes) / float64(*dev.MemTotalBytes)
			d.memFracMax = math.Max(d.memFracMax, f)
			d.hasMem = true
		}
		for _, w := range dev.ClockEventWords {
			d.words[w] = true
		}
	}
}

func (g *gpuAccum) merge(acc accumulator) {
	for idx, od := range acc.(*gpuAccum).devices {
		d := g.device(idx)
		if od.name != "" {
			d.name = od.name
		}
		d.util.merge(od.util)
		d.bw.merge(od.bw)
		d.power.merge(od.power)
		if od.hasMem {
			d.memFracMax = math.Max(d.memFracMax, od.memFracMax)
			d.hasMem = true
		}
		for w := range od.words {
			d.words[w] = true
		}
	}
}

func (g *gpuAccum) fill(v *View, c *viewContext) { v.GPU = g.stats(c.lastGPU) }

func (g *gpuAccum) stats(last *observe.GPUSample) GPUStats {
	st := GPUStats{}
	if last != nil {
		st.Source, st.Status = last.Source, last.Status
	}
	lastByIdx := map[int]observe.GPUDevice{}
	if last != nil {
		for _, d := range last.Devices {
			lastByIdx[d.Index] = d
		}
	}
	for _, i := range slices.Sorted(maps.Keys(g.devices)) {
		d := g.devices[i]
		ds := GPUDeviceStats{Index: i, Name: d.name, Last: lastByIdx[i]}
		ds.UtilP50 = optQuantile(d.util, 0.5)
		if d.util.count() > 0 {
			mx, _ := d.util.s.GetMaxValue()
			ds.UtilMax = &mx
		}
		ds.MemBWUtilP50 = optQuantile(d.bw, 0.5)
		ds.PowerWP50 = optQuantile(d.power, 0.5)
		if d.hasMem {
			f := d.memFracMax
			ds.MemUsedFracMax = &f
		}
		ds.ClockEventWords = slices.Sorted(maps.Keys(d.words))
		st.Devices = append(st.Devices, ds)
	}
	return st
}

func optQuantile(k *sketch, q float64) *float64 {
	if k.count() == 0 {
		return nil
	}
	return new(k.quantile(q))
}
