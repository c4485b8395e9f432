package gradio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/gradio/gradiotest"
)

func ExampleClient_Predict() {
	srv := gradiotest.NewServer(nil) // a simulated Gradio 5 app on 127.0.0.1
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	out, err := c.Predict(ctx, "/upper", "hello gradio")
	if err != nil {
		log.Fatal(err)
	}
	var s string
	_ = json.Unmarshal(out[0], &s)
	fmt.Println(s)

	_, err = c.Predict(ctx, "/fail", "boom")
	var appErr *gradio.AppError
	if errors.As(err, &appErr) {
		fmt.Println("gr.Error:", appErr.Message)
	}
	// Output:
	// HELLO GRADIO
	// gr.Error: deliberate failure for input 'boom'
}

func ExampleClient_Submit() {
	srv := gradiotest.NewUnstartedServer(nil)
	srv.StepDelay = -1 // no pause between the generator's yields
	srv.Start()
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	job, err := c.Submit(ctx, "/count", 3)
	if err != nil {
		log.Fatal(err)
	}
	for ev := range job.Events() {
		switch ev.Kind {
		case gradio.EventOutput, gradio.EventCompleted:
			fmt.Println(ev.Kind, string(ev.Data[0]))
		}
	}
	// Output:
	// output "0"
	// output "0 1"
	// output "0 1 2"
	// completed "0 1 2"
}

// ExampleConnect connects with the options a long-running service sets.
func ExampleConnect() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL,
		gradio.WithLogger(slog.New(slog.DiscardHandler)), // the service's logger; nil logs nothing
		gradio.WithHeaderTimeout(10*time.Second),         // a stalled app fails fast...
		gradio.WithStreamGapTimeout(time.Minute),         // ...while heartbeats keep long calls alive
		gradio.WithCancelTimeout(2*time.Second),          // bounds the /cancel sent when a ctx ends
		gradio.WithHeartbeat(true),                       // keep /heartbeat open whatever the config says
		gradio.WithEagerInfo(),                           // fetch /info now, not at the first keyword call
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	out, err := c.Predict(ctx, "/count", gradio.Kwargs{"n": 2})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out[0]))
	// Output: "0 1"
}

// ExampleConnect_space connects by Space id: a sleeping Space is a
// *SpaceError, unless WithWakeTimeout lets Connect wake it and wait.
func ExampleConnect_space() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()
	hub := gradiotest.NewHub() // a simulated Hugging Face Hub
	defer hub.Close()
	hub.AddSpace("owner/app", srv)
	hub.SetWakeDelay(50 * time.Millisecond)
	hub.SetStage("owner/app", gradiotest.StageSleeping)

	ctx := context.Background()
	_, err := gradio.Connect(ctx, "owner/app", gradio.WithHubURL(hub.URL))
	var se *gradio.SpaceError
	if errors.As(err, &se) {
		fmt.Println(se.Stage, "temporary:", se.Temporary(), "not running:", errors.Is(err, gradio.ErrSpaceNotRunning))
	}

	c, err := gradio.Connect(ctx, "owner/app", gradio.WithHubURL(hub.URL),
		gradio.WithWakeTimeout(time.Minute), gradio.WithWakePollInterval(20*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println(c.SpaceID(), "is awake")
	// Output:
	// SLEEPING temporary: true not running: true
	// owner/app is awake
}

// ExampleWithLogin calls an app protected by Gradio's login
// (launch(auth=...)).
func ExampleWithLogin() {
	srv := gradiotest.NewUnstartedServer(nil)
	srv.Username, srv.Password = "ada", "s3cret"
	srv.Start()
	defer srv.Close()

	ctx := context.Background()
	_, err := gradio.Connect(ctx, srv.URL, gradio.WithLogin("ada", "wrong"))
	fmt.Println("wrong password:", errors.Is(err, gradio.ErrLoginFailed))

	c, err := gradio.Connect(ctx, srv.URL, gradio.WithLogin("ada", "s3cret"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	out, err := c.Predict(ctx, "/upper", "signed in")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out[0]))
	// Output:
	// wrong password: true
	// "SIGNED IN"
}

// ExampleJob reads a finished job without reading its events.
func ExampleJob() {
	srv := gradiotest.NewUnstartedServer(nil)
	srv.StepDelay = -1 // no pause between the generator's yields
	srv.Start()
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	job, err := c.Submit(ctx, "/count", 2)
	if err != nil {
		log.Fatal(err)
	}
	<-job.Done()
	fmt.Println("status:", job.Status().Kind)
	for _, out := range job.Outputs() { // each partial output, then the final one
		fmt.Println(string(out[0]))
	}
	// Output:
	// status: completed
	// "0"
	// "0 1"
	// "0 1"
}

// ExampleJob_Cancel stops a long call at the app.
func ExampleJob_Cancel() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	job, err := c.Submit(ctx, "/slow", 600) // ten minutes
	if err != nil {
		log.Fatal(err)
	}
	if err := job.Cancel(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = job.Wait(ctx)
	fmt.Println("cancelled:", errors.Is(err, gradio.ErrCanceled))
	// Output: cancelled: true
}

// ExampleClient_Config lists what an endpoint takes, from the app's config.
func ExampleClient_Config() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	cfg := c.Config()
	d, err := cfg.Endpoint("/counter")
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range d.Inputs {
		if cfg.IsState(id) {
			fmt.Println("gr.State, sent as null")
			continue
		}
		fmt.Println("input:", cfg.Component(id).Label())
	}
	fmt.Println("streaming inputs:", d.Streaming())

	_, err = cfg.Endpoint("/nope")
	fmt.Println(errors.Is(err, gradio.ErrUnknownEndpoint))
	// Output:
	// input: item
	// gr.State, sent as null
	// streaming inputs: false
	// true
}

// ExampleClient_APIInfo lists an endpoint's parameters, the names
// gradio.Kwargs takes, from the app's /info.
func ExampleClient_APIInfo() {
	srv := gradiotest.NewServer(nil)
	defer srv.Close()

	ctx := context.Background()
	c, err := gradio.Connect(ctx, srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	info, err := c.APIInfo(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var ep *gradio.EndpointInfo = info.Named["/counter"]
	for _, p := range ep.Parameters { // State inputs are not parameters
		fmt.Printf("%s: %s (default given: %v)\n", p.Name(), p.PythonType.Type, p.HasDefault)
	}
	// Output: text: str (default given: false)
}
