package sim_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/tokentop/tokentop/sim"
)

// Example serves a scenario over HTTP, as `tokentop sim` does.
func Example() {
	k, err := sim.Scenario("healthy")
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := sim.New(k)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(ctx) }) // requests progress only while Run runs
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ConnContext = s.ConnContext // token events go straight to the connection
	ts.Start()
	defer func() {
		cancel()
		wg.Wait()
		ts.Close()
	}()

	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"one two three","max_tokens":3,"ignore_eos":true}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"text":" lorem ipsum dolor"`))
	// Output: 200 true
}
