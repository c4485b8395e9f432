package sessionpool_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/gradiopool/gradiopool/pool/sessionpool"
)

// conn stands in for a connected *gradio.Client.
type conn struct{ n int }

func (c *conn) Upper(s string) string { return strings.ToUpper(s) }

func ExamplePool() {
	connects := 0
	p, err := sessionpool.New(sessionpool.Config[*conn]{
		Connect: func(ctx context.Context) (*conn, error) {
			connects++ // the sole session here: MaxSessions 1
			return &conn{n: connects}, nil
		},
		Close:       func(c *conn) { fmt.Println("closed session", c.n) },
		MinSessions: 1,
		MaxSessions: 1,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	fmt.Println("connected before first use:", p.Stat().Total)
	for range 3 {
		err := p.AcquireFunc(ctx, func(c *conn) error {
			fmt.Println(c.Upper("hello"), "from session", c.n)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	st := p.Stat()
	fmt.Printf("acquires %d, sessions created %d, idle %d\n", st.AcquireCount, st.Created, st.Available())

	if err := p.Close(ctx); err != nil {
		panic(err)
	}
	_, err = p.Acquire(ctx)
	fmt.Println(err)
	// Output:
	// connected before first use: 0
	// HELLO from session 1
	// HELLO from session 1
	// HELLO from session 1
	// acquires 3, sessions created 1, idle 1
	// closed session 1
	// sessionpool: pool closed
}
