package observe

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

var timeType = reflect.TypeFor[time.Time]()

// eachInstant calls f on every time.Time reachable from v, growing empty
// slices to one element and allocating nil struct pointers when grow is
// set, so that every field an event can hold is visited.
func eachInstant(v reflect.Value, path string, grow bool, f func(path string, t *time.Time)) {
	switch {
	case v.Type() == timeType:
		f(path, v.Addr().Interface().(*time.Time))
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			if !grow || v.Type().Elem().Kind() != reflect.Struct {
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
		}
		eachInstant(v.Elem(), path, grow, f)
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				eachInstant(v.Field(i), path+"."+v.Type().Field(i).Name, grow, f)
			}
		}
	case v.Kind() == reflect.Slice:
		if v.Len() == 0 && grow && v.Type().Elem().Kind() == reflect.Struct {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		for i := range v.Len() {
			eachInstant(v.Index(i), path+"[]", grow, f)
		}
	}
}

func hasMonotonic(t time.Time) bool { return strings.Contains(t.String(), " m=") }

// Every instant of every kind of event ends on the timebase: the origin's
// wall time plus the monotonic time since the origin, with no monotonic
// reading left. A field added to an event and forgotten in Pin fails here.
func TestPinPutsEveryInstantOnTheTimebase(t *testing.T) {
	origin := time.Now()
	if !hasMonotonic(origin) {
		t.Skip("this platform's clock has no monotonic reading")
	}
	b := NewTimebase(origin)
	for _, kind := range []string{KindTick, KindTrace, KindStarted, KindFirstToken, KindGaps, KindScrape,
		KindGPU, KindLag, KindInFlight, KindNotice, KindKnob, KindPulse} {
		ev, err := NewEvent(kind)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]time.Duration{}
		n := 0
		eachInstant(reflect.ValueOf(ev), kind, true, func(path string, p *time.Time) {
			n++
			d := time.Duration(n) * 1500 * time.Microsecond
			*p, want[path] = origin.Add(d), d
		})
		b.Pin(ev)
		eachInstant(reflect.ValueOf(ev), kind, false, func(path string, p *time.Time) {
			if hasMonotonic(*p) {
				t.Errorf("%s kept its monotonic reading: Pin misses it", path)
			}
			if got := p.Sub(b.Instant(origin)); got != want[path] {
				t.Errorf("%s is %v after the origin, want %v", path, got, want[path])
			}
		})
	}
}

// What the aggregator subtracts live is what a replay subtracts after the
// recording's JSON; pinning twice changes nothing; "never happened" stays.
func TestInstantSurvivesTheRecording(t *testing.T) {
	origin := time.Now()
	b := NewTimebase(origin)
	time.Sleep(time.Millisecond)
	sent, end := b.Instant(time.Now()), b.Instant(time.Now().Add(222*time.Millisecond+116564*time.Nanosecond))
	raw, err := json.Marshal(&FirstToken{Sent: sent, At: end})
	if err != nil {
		t.Fatal(err)
	}
	var back FirstToken
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if live, replay := end.Sub(sent), back.At.Sub(back.Sent); live != replay {
		t.Errorf("live %v, replayed %v", live, replay)
	}
	if again := b.Instant(sent); !again.Equal(sent) || again != sent {
		t.Errorf("pinning twice moved %v to %v", sent, again)
	}
	if z := b.Instant(time.Time{}); !z.IsZero() {
		t.Errorf("the zero time became %v", z)
	}
}
