package gradio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

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
