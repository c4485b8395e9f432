package gradiotest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

// ExampleServer drives the simulated app with plain net/http: read the
// config, join the queue and read the session's event stream.
func ExampleServer() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/config")
	if err != nil {
		panic(err)
	}
	var cfg struct {
		Version   string `json:"version"`
		Protocol  string `json:"protocol"`
		APIPrefix string `json:"api_prefix"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	fmt.Println(cfg.Version, cfg.Protocol, cfg.APIPrefix)

	api := srv.URL + cfg.APIPrefix
	body := `{"data":["hello gradio"],"fn_index":0,"session_hash":"example"}` // fn 0 is "upper"
	resp, err = http.Post(api+"/queue/join", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()

	resp, err = http.Get(api + "/queue/data?session_hash=example")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			Msg    string `json:"msg"`
			Output struct {
				Data []string `json:"data"`
			} `json:"output"`
		}
		_ = json.Unmarshal([]byte(line), &m)
		fmt.Println(m.Msg, m.Output.Data)
	}
	fmt.Println("executions:", srv.Executions("upper"))
	// Output:
	// 5.49.1 sse_v3 /gradio_api
	// estimation []
	// process_starts []
	// process_completed [HELLO GRADIO]
	// close_stream []
	// executions: 1
}

// ExampleHub resolves a Space id through the simulated Hub.
func ExampleHub() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()
	hub := gradiotest.NewHub()
	defer hub.Close()
	hub.AddSpace("sim/replica-1", srv)

	resp, err := http.Get(hub.URL + "/api/spaces/sim/replica-1/host")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var host struct{ Subdomain, Host string }
	_ = json.NewDecoder(resp.Body).Decode(&host)
	fmt.Println(host.Subdomain, host.Host == srv.URL)
	// Output: sim-replica-1 true
}

// ExampleApp_HandleGenerator registers a streaming endpoint.
func ExampleApp_HandleGenerator() {
	app := gradiotest.NewApp()
	app.HandleGenerator("spell", func(ctx context.Context, c *gradiotest.Call, yield func(...any) error) error {
		word, err := c.String(0)
		if err != nil {
			return err
		}
		for i := 1; i <= len(word); i++ {
			if err := yield(word[:i]); err != nil {
				return err // cancelled or the client went away
			}
		}
		return nil
	}, nil, nil)
	srv := gradiotest.NewServer(app)
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/gradio_api/call/spell", "application/json", strings.NewReader(`{"data":["abc"]}`))
	if err != nil {
		panic(err)
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&ev)
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/gradio_api/call/spell/" + ev.EventID)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() != "" {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// event: generating
	// data: ["a"]
	// event: generating
	// data: ["ab"]
	// event: generating
	// data: ["abc"]
	// event: complete
	// data: ["abc"]
}
